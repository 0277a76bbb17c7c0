"""Smaller JSON schemas for tools/list: every agent turn pays for the whole tool list in context.

Pydantic's schemas repeat a title on every property and spell optional values as
`anyOf: [{type: X}, {type: null}], default: null`. Without titles, with optional arguments typed by what to send
(leaving them out is how to say "none"), with bounds dropped (still enforced on call, with an error that states
them), and results listed by their field names, the list is about a third of the size without changing what is
accepted.
"""

import json
from typing import Any

LONG_ENUM = 80  # characters: shorter lists of choices (peft, backend) cost less than a reader's detour
NUMERIC_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems",
                            "minProperties", "maxProperties"})  # counts of items are bounds too


def inline_single_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace a `$defs` entry used once by its body (a name and a reference cost more than they save)."""
    defs = schema.get("$defs")
    if not isinstance(defs, dict):
        return schema
    text = json.dumps(schema)
    single = {name for name in defs if text.count(f'"#/$defs/{name}"') == 1}

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref", "")
        if ref.startswith("#/$defs/") and ref[8:] in single:
            return walk({**defs[ref[8:]], **{k: v for k, v in node.items() if k != "$ref"}})
        return {k: walk(v) for k, v in node.items() if not (k == "$defs" and node is schema)}

    out = walk(schema)
    kept = {name: walk(body) for name, body in defs.items() if name not in single}
    if kept:
        out["$defs"] = kept
    return out


def compact_tool_schema(schema: Any, *, output: bool = False) -> Any:
    """What tools/list carries for one tool's input or output schema. A result is listed by its top-level
    field names only: the agent reads the result itself (the model APIs agents run on pass no output schema to
    the model), and a client's UI needs the names, not the shape of every nested list."""
    out = compact(inline_single_refs(schema), output=output, root=True)
    if output and isinstance(out.get("properties"), dict):
        out["properties"] = {name: {} for name in out["properties"]}
    return out


def compact(schema: Any, *, output: bool = False, root: bool = False) -> Any:
    """Drops titles, string length limits and patterns (descriptions give the shape), null and false defaults
    and numeric bounds. `output=True` also drops defaults, `required`, enums and descriptions, which describe
    arguments, not results."""
    if isinstance(schema, list):
        return [compact(item, output=output) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and (value is None or value == [] or value == {} or output):
            continue  # an empty list or object is what leaving the argument out sends
        if key == "additionalProperties" and (value is True or value in ({"type": "string"}, {})):
            continue  # the default, or a mapping of names to text (its description says what it maps)
        if key in ("maxLength", "minLength", "pattern") or (
            output and key in ("required", "enum", "additionalProperties", "description")
        ):
            continue
        if key in NUMERIC_BOUNDS:
            continue  # sanity limits, enforced on call with an error that states them
        if key == "default" and value is False:
            continue  # a flag is off unless sent
        if key in ("properties", "$defs"):
            out[key] = {name: compact(sub, output=output) for name, sub in value.items()}
        else:
            out[key] = compact(value, output=output)
    if output and out.get("type") in ("string", "number", "integer", "boolean") and set(out) == {"type"}:
        return {}  # a result's scalar: its name says what it is, and the agent reads the value itself
    if output and set(out) <= {"items", "type"} and out.get("items") == {}:
        return {}  # a list of scalars (warnings, columns): as untyped as a scalar
    if not output and "enum" in out and out.get("type") == "string" and \
            all(isinstance(value, str) for value in out["enum"]):
        del out["type"]  # the choices say it
    if output and not root and (("properties" in out and out.get("type") == "object") or
                                ("items" in out and out.get("type") == "array")):
        del out["type"]  # implied by properties/items
    options = out.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        other = options[0] if options[1] == {"type": "null"} else options[1]
        del out["anyOf"]
        if output:  # null or anything: left untyped
            return {k: v for k, v in out.items() if k != "type"}
        kind = other.get("type")
        if isinstance(kind, str | list) or "$ref" in other or "items" in other or "enum" in other:
            out = {**other, **out}  # an optional argument: typed by what to send; omitting it means none
        else:
            out["anyOf"] = options
    return out


def declare_once(schemas: list[Any]) -> list[Any]:
    """Input schemas where a parameter described by an earlier tool in the list, with the same name and words
    (or the same long list of choices, such as `method`'s), keeps its type but not the repetition: the agent
    reads the whole list, so once is enough (and the call is still validated against the choices)."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for schema in schemas:
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(properties, dict):
            out.append(schema)
            continue
        trimmed = {}
        for name, prop in properties.items():
            for key in ("description", "enum"):
                said = json.dumps(prop.get(key)) if isinstance(prop, dict) and key in prop else None
                if said is None or (key == "enum" and len(said) < LONG_ENUM):
                    continue
                if (name, key, said) in seen:
                    prop = {k: v for k, v in prop.items() if k != key} | ({"type": "string"} if key == "enum" else {})
                else:
                    seen.add((name, key, said))
            trimmed[name] = prop
        out.append({**schema, "properties": trimmed})
    return out
