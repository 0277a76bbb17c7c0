"""Argument errors in words a newcomer (or an agent) can act on: what is wrong and what to send, never pydantic's
internals or a regular expression."""

from pydantic import ValidationError

# What a field whose shape is checked by a pattern should look like.
SHAPES = {
    "hub_model_id": "a Hub repo id 'owner/name' (letters, digits, '-', '_', '.')",
    "trackio_space_id": "a Space id 'owner/name'",
    "output_bucket": "a bucket id 'owner/name'",
    "split": "a split name such as 'train' or 'train[:10%]'",
    "dataset_split": "a split name such as 'train' or 'train[:10%]'",
    "project": "letters, digits, spaces, '.', '_' or '-' (up to 96 characters)",
    "run_name": "letters, digits, spaces, '.', '_' or '-' (up to 96 characters)",
    "lora_target_modules": "module names such as 'q_proj' (letters, digits, '.', '_' or '-')",
}
_KINDS = {
    "int_parsing": "should be a whole number", "int_type": "should be a whole number",
    "int_from_float": "should be a whole number", "float_parsing": "should be a number",
    "float_type": "should be a number", "bool_parsing": "should be true or false", "bool_type": "should be true or false",
    "string_type": "should be text", "dict_type": "should be an object ({...})", "list_type": "should be a list ([...])",
    "missing": "is required", "extra_forbidden": "is not a parameter of this tool (check the spelling)",
}


def _where(loc: tuple) -> str:
    parts = [str(p) for p in loc if not str(p).startswith("function-")]
    return ".".join(parts) or "the request"


def readable(exc: ValidationError) -> str:
    messages = []
    for error in exc.errors(include_url=False):
        where, kind = _where(error["loc"]), error["type"]
        field = next((str(p) for p in error["loc"] if isinstance(p, str)), "")
        if kind == "string_pattern_mismatch":
            text = f"{where} has the wrong shape: send {SHAPES.get(field, 'letters, digits and - _ . only')}"
        elif kind in _KINDS:
            text = f"{where} {_KINDS[kind]}"
        elif kind == "value_error":
            text = error["msg"].removeprefix("Value error, ")
            if where != "the request" and not text.startswith(where):
                text = f"{where}: {text}"
        else:
            text = f"{where} {error['msg'].replace('Input should', 'should').replace('String should', 'should')}"
        if text not in messages:
            messages.append(text)
    return "; ".join(messages)
