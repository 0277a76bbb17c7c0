"""Which names are credentials, and masking their values: the one rule run_script's env check, its secrets and
the log reader share.

A name is a credential when it ends in TOKEN, SECRET, PASSWORD, ... or in KEY (so HF_TOKEN, HFTOKEN and
WANDB_API_KEY are, and TOKENIZERS_PARALLELISM, a tokenizers setting, is not).
"""

import os
import re
from collections.abc import Callable

TOKEN_NAMES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
# The name ends in the word (HFTOKEN, AWS_SESSIONTOKEN, STRIPE_SECRETKEY): TOKENIZERS_PARALLELISM and TOKEN_LIMIT do not.
_WORDS = r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|APIKEY|SECRETKEY|PRIVATEKEY"
_CREDENTIAL = re.compile(rf"({_WORDS})$|(^|_)(API|ACCESS|PRIVATE|SECRET|SIGNING)?_?KEY(_ID)?$")
_MIN_MASKED = 8  # shorter values ("1", "true") would mask ordinary text


def looks_like_credential(name: str) -> bool:
    return name.upper() in TOKEN_NAMES or _CREDENTIAL.search(name.upper()) is not None


def masker(secrets: tuple[str, ...] = ()) -> Callable[[str], str]:
    """What masks, in a text, the value of every credential-like variable of this server's environment and of
    each secret a job was handed by name: a job that prints its environment must not leak them through its logs."""
    values = sorted({value for name, value in os.environ.items()
                     if (name in secrets or looks_like_credential(name)) and len(value) >= _MIN_MASKED},
                    key=len, reverse=True)

    def mask(text: str) -> str:
        for value in values:
            text = text.replace(value, "***")
        return text
    return mask
