"""Which names are credentials, and masking their values: the one rule run_script's env check, its secrets and
the log reader share.

A name is a credential when it ends in TOKEN, SECRET, PASSWORD, ... or in KEY (so HF_TOKEN, HFTOKEN and
WANDB_API_KEY are, and TOKENIZERS_PARALLELISM, a tokenizers setting, is not).
"""

import json
import os
import re
from collections.abc import Callable

TOKEN_NAMES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
# The name ends in the word (HFTOKEN, AWS_SESSIONTOKEN, STRIPE_SECRETKEY): TOKENIZERS_PARALLELISM and TOKEN_LIMIT do not.
_WORDS = r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|APIKEY|SECRETKEY|PRIVATEKEY"
_CREDENTIAL = re.compile(rf"({_WORDS})$|(^|_)(API|ACCESS|PRIVATE|SECRET|SIGNING)?_?KEY(_ID)?$")
_MIN_MASKED = 8  # shorter values ("1", "true") would mask ordinary text
_PLACEHOLDER = re.compile(r"\$\{[^{}]*\}|\$[A-Za-z_]\w*|%[A-Za-z_]\w*%")


def looks_like_credential(name: str) -> bool:
    return name.upper() in TOKEN_NAMES or _CREDENTIAL.search(name.upper()) is not None


def _spellings(value: str) -> set[str]:
    """The forms a printed value takes in a log line: itself, each line of a multi-line one (a key, a
    certificate; logs are read line by line), and escaped as repr() and JSON write it (quotes, backslashes and
    newlines escaped), in full and line by line."""
    parts = {value, *value.splitlines()}
    escaped = {form for part in parts for form in (repr(part)[1:-1], json.dumps(part)[1:-1],
                                                    json.dumps(part, ensure_ascii=False)[1:-1])}
    return {form.strip() for form in parts | escaped if len(form.strip()) >= _MIN_MASKED}


def masker(secrets: tuple[str, ...] = ()) -> Callable[[str], str]:
    """What masks, in a text, the value of every credential-like variable of this server's environment and of
    each secret a job was handed by name: a job that prints its environment must not leak them through its logs,
    nor print one in pieces (a multi-line key) or escaped (repr, JSON)."""
    values = sorted({form for name, value in os.environ.items() if name in secrets or looks_like_credential(name)
                     for form in _spellings(value)}, key=len, reverse=True)

    def mask(text: str) -> str:
        for value in values:
            text = text.replace(value, "***")
        return text
    return mask


def unexpanded(value: str | None) -> bool:
    """A client config's placeholder passed on as text: Claude Code hands `${HF_TOKEN}` of an unset variable
    through as it is (plugin.json's env), Cursor `${env:HF_TOKEN}` (.cursor/mcp.json); `$HF_TOKEN` and
    `%HF_TOKEN%` are the shells' spellings. No credential is written so."""
    return value is not None and _PLACEHOLDER.fullmatch(value.strip()) is not None


def secret_value(name: str) -> str:
    """The value of a secret a job is handed by name, from this server's environment: unset, empty or a client's
    unexpanded placeholder is an error (the job would get the placeholder's text as its password)."""
    from hf_train_mcp.errors import TrainError

    value = os.environ.get(name)
    if not value or unexpanded(value):
        state = "a placeholder that was never expanded" if value else "not set"
        raise TrainError(f"secret {name} is {state} in this server's environment; set it there (or drop it from "
                         "secrets). Nothing was submitted.")
    return value
