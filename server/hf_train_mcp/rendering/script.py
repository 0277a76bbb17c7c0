"""Render a training script from templates/: every user value enters as a Python (or TOML) literal.

The CONFIG is typed (rendering/config.py): checked against its schema before rendering, and the rendered script
is read for the keys it can reach, so a key a template lacks fails here. User text never reaches the template as raw text. The whole run configuration is one dict rendered by
`python_literal`, which admits only plain data and proves round-trip with `ast.literal_eval`; the PEP 723
header takes values only through `toml_literal`, whose output never holds a newline. A rendered script is
compiled before it is returned, so a template bug surfaces here and not on a paid GPU.
"""

import hashlib
import json
import math
import pprint
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_train_mcp.rendering import pysource
from hf_train_mcp.rendering.config import ScriptConfig, check_template_keys, validate_config

if TYPE_CHECKING:
    import jinja2

_PLAIN_SCALARS = (str, int, float, bool, type(None))


def _check_plain(value: Any, where: str = "value") -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} is not a finite number")
    if isinstance(value, _PLAIN_SCALARS):
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where} has a non-string key {key!r}")
            _check_plain(item, f"{where}[{key!r}]")
        return
    raise ValueError(f"{where} of type {type(value).__name__} cannot be written into a script")


def python_literal(value: Any) -> str:
    """Source text that evaluates to `value`, for plain data only (str, numbers, bool, None, list, dict)."""
    _check_plain(value)
    text = pprint.pformat(value, width=100, sort_dicts=False)
    if pysource.literal(text) != value:  # pragma: no cover - pprint guarantees this for plain data
        raise ValueError("value does not survive as a Python literal")
    return text


def toml_literal(value: str | int | float | bool) -> str:
    """A TOML value on one line (JSON strings are valid TOML basic strings and escape every newline)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        _check_plain(value)
        return repr(value)
    return json.dumps(str(value))


def templates_dir() -> Path:
    """templates/ inside the installed wheel, else the repository's top-level templates/ (editable install)."""
    packaged = resources.files("hf_train_mcp") / "templates"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "templates"


@cache
def _environment() -> "jinja2.Environment":
    import jinja2  # on first render: the backends that hold a Script are imported before tools/list

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # the output is Python, escaped by the literal filters instead
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["py"] = python_literal
    env.filters["toml"] = toml_literal
    return env


@dataclass(frozen=True)
class Script:
    text: str
    sha256: str


def render_script(method: str, schema: type[ScriptConfig], context: dict[str, Any]) -> Script:
    """Render templates/<method>.py.j2 with `context`, whose "config" must be a valid `schema`; the result is
    guaranteed to compile and to read no CONFIG key its schema lacks."""
    validate_config(context["config"], schema)
    with pysource.LOCK:  # Jinja compiles a template to Python on first use
        text = _environment().get_template(f"{method}.py.j2").render(**context)
        pysource.check_compiles(text, f"{method}.py")
        check_template_keys(text, schema, python_literal(context["config"]))
    return Script(text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


def template_names() -> list[str]:
    return sorted(path.name.removesuffix(".py.j2") for path in templates_dir().glob("*.py.j2"))


def template_source(method: str) -> str:
    return (templates_dir() / f"{method}.py.j2").read_text()
