"""What every tool's request is made of: the Request base (its fields are the tool's parameters and the CLI
command's options), the field types several tools share, and the methods' own options, which a request takes flat
and the tool schema lists inside one `options` object."""

from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from hf_train_mcp import methods

# ASCII classes, not \w: Hub names are ASCII, and pydantic-core compiles a Unicode \w into a large automaton
# (~15 ms per pattern at import, most of the server's start-up)
SplitName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-\[\]:%]{1,64}$")]
Label = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\- ]{1,96}$")]
# Declared once, used by every tool that launches a job
MaxCost = Annotated[float, Field(gt=0, description="refuse if timeout x price is higher")]
DryRun = Annotated[bool, Field(description="render and plan only: nothing launched")]
IdempotencyKey = Annotated[str, Field(min_length=1, max_length=128)]
TaskName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,96}$")]


class Request(BaseModel):
    """What one tool takes: its fields are the tool's parameters (MCP schema) and the CLI command's options."""

    # validators are built on a tool's first call: a fresh server lists tools from shell/tools_list.json
    model_config = ConfigDict(extra="forbid", defer_build=True)


def with_method_options(base: type[Request], *, sizing_only: bool) -> Any:
    """`base` plus the methods' own options (methods/), each declared once by its method module. sizing_only:
    the options that change time or memory (what estimate_cost takes)."""
    fields = {
        name: (option.annotation if option.default is not None else option.annotation | None, option.default)
        for name, option in methods.options().items()
        if (option.sizing or not sizing_only) and name not in base.model_fields
    }
    return create_model(base.__name__.lstrip("_"), __base__=base, __module__=base.__module__, __doc__=base.__doc__,
                        **fields)


def nested_options(request: type[Request]) -> list[str]:
    """The method options a request takes inside its `options` object (the tool schema lists them there)."""
    return [name for name, option in methods.options().items() if name in request.model_fields and not option.top_level]


def options_description(names: list[str]) -> str:
    """What the `options` parameter says: each nested option with its own words (and choices), from methods/."""
    return "method settings: " + "; ".join(f"{name} ({_option_words(name)})" for name in names)


@cache
def _option_words(name: str) -> str:
    """One option's description and choices, from its JSON schema (several tools share an option: built once)."""
    schema = TypeAdapter(methods.options()[name].annotation).json_schema()
    choices = schema.get("enum") or schema.get("items", {}).get("enum")
    return schema.get("description", "") + (f": {'|'.join(choices)}" if choices else "")


def lift_options(data: Any, accepted: list[str]) -> Any:
    """The `options` object of a tool call as the flat fields a request holds (so that stored requests, sweep
    grids and CLI flags name each option directly)."""
    if not isinstance(data, dict) or "options" not in data:
        return data
    nested, rest = data["options"], {k: v for k, v in data.items() if k != "options"}
    if nested is None:
        return rest
    if not isinstance(nested, dict):
        raise ValueError('options must be an object such as {"beta": 0.1}')
    unknown = sorted(set(nested) - set(accepted))
    if unknown:
        raise ValueError(f"options takes {', '.join(accepted) or 'nothing here'}, not {', '.join(unknown)}")
    twice = sorted(name for name in nested if rest.get(name) is not None)
    if twice:
        raise ValueError(f"{', '.join(twice)} sent both inside options and beside it: send it once")
    return rest | nested
