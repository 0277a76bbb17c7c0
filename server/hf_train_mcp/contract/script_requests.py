"""What run_script takes: the caller's own program (a uv script, an https URL, a local file or folder, or an
image and a command), its dependencies, secrets by name, environment and hardware."""

import re
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from hf_train_mcp.access import check_reference
from hf_train_mcp.contract.request_fields import DryRun, IdempotencyKey, MaxCost, Request
from hf_train_mcp.contract.results import BackendName, Flavor, Timeout
from hf_train_mcp.credentials import looks_like_credential
from hf_train_mcp.user_scripts.source import IMAGE_PATTERN, SECRET_NAME_PATTERN, source_kind


SecretName = Annotated[str, Field(pattern=SECRET_NAME_PATTERN)]
Arg = Annotated[str, Field(max_length=4096)]


def _one_requirement(value: str) -> str:
    """One `uv run --with` item: a space would make it more than a requirement (e.g. ' --index-url ...')."""
    if " " in value:
        raise ValueError(f"dependency {value[:80]!r} holds spaces: write one requirement without them, e.g. "
                         "'torch>=2.4' or 'trl[peft]==1.16.0'")
    return value


# a requirement uv takes after --with (never an option: it starts with a letter or digit; the pattern admits a
# space so that _one_requirement, not a regular expression, says what is wrong with one)
Requirement = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~*+;:/@ ]{0,255}$"),
                        AfterValidator(_one_requirement)]
Image = Annotated[str, Field(pattern=IMAGE_PATTERN)]


class ScriptRequest(Request):
    script: Annotated[str, Field(min_length=1, max_length=200_000)] | None = None  # the tool's words say what
    script_args: Annotated[list[Arg], Field(max_length=256)] = []
    folder: Annotated[str, Field(min_length=1, max_length=512),
                      AfterValidator(check_reference)] | None = None
    image: Image | None = None
    command: Annotated[list[Arg], Field(min_length=1, max_length=256)] | None = None
    dependencies: Annotated[list[Requirement], Field(max_length=64)] | None = None
    secrets: Annotated[list[SecretName], Field(max_length=32)] | None = None
    # names checked below, not by a key pattern (a patternProperties schema costs every agent turn)
    env: Annotated[dict[str, Annotated[str, Field(max_length=4096)]], Field(max_length=64)] | None = None
    flavor: Flavor | None = None
    timeout: Timeout | None = None
    backend: BackendName | None = None
    max_cost_usd: MaxCost | None = None
    idempotency_key: IdempotencyKey | None = None
    dry_run: DryRun = False

    @staticmethod
    def argv_field(given: dict) -> str:
        """Which argument list the CLI's words after `--` fill: the script's arguments, else the command."""
        return "script_args" if given.get("script") else "command"

    @model_validator(mode="after")
    def _one_program(self) -> "ScriptRequest":
        if (self.script is None) == (self.command is None):
            raise ValueError("send script (source, https URL or .py path) or command (an argv list, with image or "
                             "folder), one of the two")
        if self.command is not None and not (self.image or self.folder):
            raise ValueError("command runs in an image: send image (e.g. 'huggingface/trl'), or folder to run it in a "
                             "copy of your project")
        if self.command is not None and (self.script_args or self.dependencies):
            raise ValueError("script_args and dependencies go with script; put arguments in command itself")
        if self.folder and self.script is not None and (source_kind(self.script) != "path" or ".." in self.script
                                                        or self.script.startswith(("/", "~", "-"))):
            raise ValueError("with folder, script is the entry file's path inside it, e.g. 'train.py'")
        for name in self.env or {}:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
                raise ValueError(f"env name {name[:64]!r} is not a variable name (letters, digits, '_')")
            if looks_like_credential(name):
                raise ValueError(f"env {name!r} looks like a credential: send its name in secrets (a paid job gets "
                                 "HF_TOKEN as a secret always), never its value in env")
        return self
