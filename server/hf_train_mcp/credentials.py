"""Which names are credentials, and masking their values: the one rule run_script's env check, its secrets and
the log reader share.

A name is a credential when one of its `_`-separated words is TOKEN, SECRET, PASSWORD, ... (so HF_TOKEN and
WANDB_API_KEY are, and TOKENIZERS_PARALLELISM, a tokenizers setting, is not).
"""

import os
import re
from collections.abc import Callable

TOKEN_NAMES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
_WORDS = r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|APIKEY|PRIVATE_KEY|API_KEY|ACCESS_KEY|AUTH"
_CREDENTIAL = re.compile(rf"(^|_)({_WORDS})(_|$)")
_MIN_MASKED = 8  # shorter values ("1", "true") would mask ordinary text


def looks_like_credential(name: str) -> bool:
    return name.upper() in TOKEN_NAMES or _CREDENTIAL.search(name.upper()) is not None


def masker() -> Callable[[str], str]:
    """What masks the value of every credential-like variable of this server's environment in a text: a job
    that prints its environment (or a secret it was handed) must not leak it through its logs."""
    values = sorted({value for name, value in os.environ.items()
                     if looks_like_credential(name) and len(value) >= _MIN_MASKED}, key=len, reverse=True)

    def mask(text: str) -> str:
        for value in values:
            text = text.replace(value, "***")
        return text
    return mask
