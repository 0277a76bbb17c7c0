"""A caller's own script as run_script sees it: what it is (inline source, URL, local file), its PEP 723 header
and the `[tool.hf-jobs]` launch table in it.

`run_uv_job` ignores that table (only `hf jobs uv run` reads it), so it is read here: what the call leaves out,
the header supplies; the call always wins.
"""

import re
import tomllib
from dataclasses import dataclass, field

# The reference regular expression of PEP 723 (packaging.python.org, "Inline script metadata")
_BLOCK = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
JOBS_KEYS = ("flavor", "timeout", "secrets", "image")  # what the [tool.hf-jobs] table may set for run_script


def source_kind(script: str) -> str:
    """'url', 'path' (a local .py file) or 'inline' (the source itself), by spelling alone: a remote caller's
    text never makes the server look at its disk to decide."""
    text = script.strip()
    if re.match(r"^[a-z][a-z0-9+.-]*://", text, re.IGNORECASE):
        return "url"
    if "\n" not in text and text.endswith(".py") and " " not in text.split("/")[-1]:
        return "path"
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
    secrets = table.get("secrets", [])
    if not isinstance(secrets, list) or not all(isinstance(s, str) for s in secrets):
        raise ValueError("[tool.hf-jobs] secrets must be a list of names, e.g. secrets = [\"HF_TOKEN\"]")
    for key in ("flavor", "image"):
        if key in table and not isinstance(table[key], str):
            raise ValueError(f"[tool.hf-jobs] {key} must be a string")
    dependencies = data.get("dependencies", [])
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        raise ValueError("the header's dependencies must be a list of strings")
    return Header(present=True, dependencies=tuple(dependencies), requires_python=data.get("requires-python"),
                  jobs=dict(table))
