"""The training methods, one module each; every other layer asks this registry (see methods/base.py).

Adding a method: a module here with its MethodSpec (its formats, evaluation kind and pipeline tag), a
templates/<name>.py.j2, an entry in data/formats.py for a format no method read before, and its name in MODULES
(`register` adds one from elsewhere: a test's own method).
"""

from importlib import import_module

from hf_train_mcp.methods.base import MethodSpec, Option

MODULES = ("sft", "dpo", "grpo", "reward", "kto", "distill", "text_classification", "image_classification",
           "embedding")
REGISTRY: dict[str, MethodSpec] = {spec.name: spec for spec in (
    import_module(f"hf_train_mcp.methods.{module}").METHOD for module in MODULES)}
NAMES: tuple[str, ...] = tuple(REGISTRY)


def register(spec: MethodSpec) -> MethodSpec:
    """Add a method declared outside MODULES; the request and result models name it when they are imported
    after this (their Literal of methods is read once)."""
    global NAMES
    if spec.name in REGISTRY:
        raise ValueError(f"method {spec.name!r} is declared twice")
    REGISTRY[spec.name] = spec
    NAMES = tuple(REGISTRY)
    return spec


def get(name: str) -> MethodSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; one of {', '.join(NAMES)}") from None


def for_peft_task(task: str | None, *, labelled: bool = False) -> str | None:
    """The method a saved adapter was trained with, as far as its PEFT task type tells (a classifier head), and
    whether its folder names classes (labels.json, which the classifiers write and a reward model does not)."""
    found = [name for name, spec in REGISTRY.items() if spec.peft_task == task and spec.classifier]
    named = [name for name in found if (REGISTRY[name].eval_metric == "accuracy") == labelled]
    return (named or found or [None])[0]


def options() -> dict[str, Option]:
    """Every method option once (an option several methods take is the same object in each)."""
    found: dict[str, Option] = {}
    for spec in REGISTRY.values():
        for option in spec.options:
            if found.setdefault(option.name, option) is not option:
                raise AssertionError(f"option {option.name} is declared twice: import it from one module")
    return found


def takers(option: str) -> tuple[str, ...]:
    """The methods that take an option."""
    return tuple(name for name, spec in REGISTRY.items() if any(o.name == option for o in spec.options))


def check_request(req) -> None:
    """An option the chosen method does not take is an error (silently ignoring it would surprise), then the
    method's own checks."""
    fields = type(req).model_fields
    for name, option in options().items():
        if name in fields and getattr(req, name) not in (None, option.default) and req.method not in takers(name):
            names = takers(name)
            raise ValueError(f"{name} applies to method {' or '.join(repr(n) for n in names)} only, not "
                             f"{req.method!r}: drop it or pick one of those methods")
    get(req.method).check(req)


__all__ = ["MethodSpec", "Option", "REGISTRY", "NAMES", "get", "register", "options", "takers", "check_request"]
