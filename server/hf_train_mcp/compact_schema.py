"""Smaller JSON schemas for tools/list: every agent turn pays for the whole tool list in context.

Pydantic's schemas repeat a title on every property and spell optional values as
`anyOf: [{type: X}, {type: null}], default: null`. The same constraints fit in `type: [X, "null"]` with
no titles, which roughly halves the list without changing what is accepted or returned.
"""

from typing import Any


def compact(schema: Any, *, output: bool = False) -> Any:
    """Also drops string length limits and patterns (still enforced on call; descriptions give the shape). `output=True` drops defaults and `required`,
    which describe arguments, not results (every result field is always present), and enums, value types and
    descriptions of results, which the field names and tool descriptions already explain."""
    if isinstance(schema, list):
        return [compact(item, output=output) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and (value is None or output):
            continue
        if key in ("maxLength", "minLength", "pattern") or (
            output and key in ("required", "enum", "additionalProperties", "description")
        ):
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: compact(sub, output=output) for name, sub in value.items()}
        else:
            out[key] = compact(value, output=output)
    options = out.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        other = options[0] if options[1] == {"type": "null"} else options[1]
        kind = other.get("type")
        if isinstance(kind, str | list):
            del out["anyOf"]
            out = {**other, **out, "type": [*(kind if isinstance(kind, list) else [kind]), "null"]}
    return out
