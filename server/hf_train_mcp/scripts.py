"""A caller's own script as run_script sees it: what it is (inline source, URL, local file), its PEP 723 header
and the `[tool.hf-jobs]` launch table in it.

`run_uv_job` ignores that table (only `hf jobs uv run` reads it), so it is read here: what the call leaves out,
the header supplies; the call always wins.
"""

import fnmatch
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from hf_train_mcp import pysource

# The reference regular expression of PEP 723 (packaging.python.org, "Inline script metadata")
_BLOCK = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
_CODE_CHARS = frozenset("()=;'\"#")  # in a one-line script, never in a file's path as callers send it
JOBS_KEYS = ("flavor", "timeout", "secrets", "image")  # what the [tool.hf-jobs] table may set for run_script
_SECRET_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")  # as the call's secrets are held (request.py)


def source_kind(script: str) -> str:
    """'url', 'path' (a local .py file) or 'inline' (the source itself), by spelling alone: a remote caller's
    text never makes the server look at its disk to decide."""
    text = script.strip()
    if re.match(r"^[a-z][a-z0-9+.-]*://", text, re.IGNORECASE):
        return "url"
    if "\n" not in text and text.endswith(".py") and not _CODE_CHARS.intersection(text):
        return "path"  # spaces allowed: "my scripts/train v2.py" is a file name, not code
    return "inline"


@dataclass(frozen=True)
class Header:
    """The `# /// script` block: dependencies, requires-python and the [tool.hf-jobs] launch table."""

    present: bool = False
    dependencies: tuple[str, ...] = ()
    requires_python: str | None = None
    jobs: dict = field(default_factory=dict)  # flavor, timeout, secrets, image, as the table spells them


def read_header(source: str) -> Header:
    """The script's PEP 723 header; a malformed one is refused (uv would refuse it in the job, after billing)."""
    blocks = [m for m in _BLOCK.finditer(source) if m.group("type") == "script"]
    if not blocks:
        return Header()
    if len(blocks) > 1:
        raise ValueError("the script has more than one `# /// script` block; PEP 723 allows one")
    content = "".join(line[2:] if line.startswith("# ") else line[1:]
                      for line in blocks[0].group("content").splitlines(keepends=True))
    try:
        data = tomllib.loads(content)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"the script's `# /// script` header is not valid TOML ({exc})") from None
    table = data.get("tool", {}).get("hf-jobs", {})
    if not isinstance(table, dict):
        raise ValueError("[tool.hf-jobs] in the script header must be a table")
    unknown = sorted(set(table) - set(JOBS_KEYS))
    if unknown:
        raise ValueError(f"[tool.hf-jobs] keys {', '.join(unknown)} are not read by run_script; it reads "
                         f"{', '.join(JOBS_KEYS)}")
    _check_jobs_table(table)
    dependencies = data.get("dependencies", [])
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        raise ValueError("the header's dependencies must be a list of strings")
    return Header(present=True, dependencies=tuple(dependencies), requires_python=data.get("requires-python"),
                  jobs=dict(table))


def _check_jobs_table(table: dict) -> None:
    """The [tool.hf-jobs] values' types, as the call's own arguments would be held to them."""
    secrets = table.get("secrets", [])
    if not isinstance(secrets, list) or not all(isinstance(s, str) and _SECRET_NAME.fullmatch(s) for s in secrets):
        raise ValueError("[tool.hf-jobs] secrets must be a list of variable names, e.g. secrets = [\"HF_TOKEN\"]")
    for key in ("flavor", "image"):
        if key in table and not (isinstance(table[key], str) and table[key].strip()):
            raise ValueError(f"[tool.hf-jobs] {key} must be a non-empty string")
    timeout = table.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, str | int)):
        raise ValueError("[tool.hf-jobs] timeout must be a duration such as \"2h\" or \"90m\", or seconds")


def check_syntax(source: str, header: Header, name: str) -> None:
    """A script that does not compile is refused here, not after a job was billed for starting it; unless its
    header asks for a newer Python than this server's, whose syntax this one may not read."""
    import platform

    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        if header.requires_python and platform.python_version() not in SpecifierSet(header.requires_python):
            return
    except InvalidSpecifier:
        raise ValueError(f"the header's requires-python {header.requires_python!r} is not a version specifier "
                         "(e.g. \">=3.11\")") from None
    try:
        pysource.check_compiles(source, name)
    except SyntaxError as exc:
        raise ValueError(f"{name} does not compile: line {exc.lineno}: {exc.msg}") from None


# What a project folder's copy leaves behind: history, environments, caches and credentials (a job gets its
# secrets as secrets). One list for the hash, the bucket upload and the local copy.
LEFT_OUT_DIRS = (".git", ".hg", ".venv", "venv", "__pycache__", "node_modules", ".ipynb_checkpoints", ".mypy_cache",
                 ".pytest_cache")
LEFT_OUT_FILES = (".env", ".env.*", ".netrc", "*.pyc")


def left_out(relative: PurePosixPath) -> bool:
    """Whether a file of a project folder (its path inside the folder) stays out of the job's copy."""
    return (any(part in LEFT_OUT_DIRS for part in relative.parts[:-1])
            or any(fnmatch.fnmatchcase(relative.name, pattern) for pattern in LEFT_OUT_FILES))


def sync_excludes() -> list[str]:
    """The same rule as fnmatch patterns on paths inside the folder, as huggingface_hub's bucket sync reads them
    (its `*` crosses '/')."""
    dirs = [pattern for name in LEFT_OUT_DIRS for pattern in (f"{name}/*", f"*/{name}/*")]
    return [*dirs, *(pattern for name in LEFT_OUT_FILES for pattern in (name, f"*/{name}"))]
