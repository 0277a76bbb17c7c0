"""A caller's own script as run_script sees it: what it is (inline source, URL, local file), its PEP 723 header
and the `[tool.hf-jobs]` launch table in it.

`run_uv_job` ignores that table (only `hf jobs uv run` reads it), so it is read here: what the call leaves out,
the header supplies; the call always wins.
"""

import fnmatch
from collections.abc import Callable
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from hf_train_mcp.rendering import pysource

# The reference regular expression of PEP 723 (packaging.python.org, "Inline script metadata")
_BLOCK = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
IMAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-/:@]{0,255}$"  # a Docker image, as the call's `image` is held too
JOB_PYTHON = (3, 12)  # the Python of the uv image a script job runs in (backends/jobs_commands.py UV_IMAGE)
JOBS_KEYS = ("flavor", "timeout", "secrets", "image")  # what the [tool.hf-jobs] table may set for run_script
SECRET_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]{0,63}$"  # a secret's name, in the header as in the call (contract/requests)


def source_kind(script: str) -> str:
    """'url', 'path' (a local .py file) or 'inline' (the source itself), by spelling alone: a remote caller's
    text never makes the server look at its disk to decide."""
    text = script.strip()
    if re.match(r"^[a-z][a-z0-9+.-]*://", text, re.IGNORECASE):
        return "url"
    if "\n" not in text and text.endswith(".py"):
        return "path"  # "my scripts/train (1).py" is a file name: no one-line script ends in ".py"
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
    tool = data.get("tool", {})
    table = tool.get("hf-jobs", {}) if isinstance(tool, dict) else None
    if not isinstance(table, dict):
        raise ValueError("[tool.hf-jobs] in the script header must be a table")
    if not isinstance(data.get("requires-python", ""), str):
        raise ValueError("the header's requires-python must be a string, e.g. requires-python = \">=3.11\"")
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
    if not isinstance(secrets, list) or not all(isinstance(s, str) and re.fullmatch(SECRET_NAME_PATTERN, s) for s in secrets):
        raise ValueError("[tool.hf-jobs] secrets must be a list of variable names, e.g. secrets = [\"HF_TOKEN\"]")
    for key in ("flavor", "image"):
        if key in table and not (isinstance(table[key], str) and table[key].strip()):
            raise ValueError(f"[tool.hf-jobs] {key} must be a non-empty string")
    if "image" in table and not re.fullmatch(IMAGE_PATTERN, table["image"]):
        raise ValueError(f"[tool.hf-jobs] image {table['image'][:80]!r} is not a Docker image reference (e.g. "
                         "\"huggingface/trl:1.16.0\")")
    timeout = table.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, str | int)):
        raise ValueError("[tool.hf-jobs] timeout must be a duration such as \"2h\" or \"90m\", or seconds")


def check_syntax(source: str, header: Header, name: str) -> str | None:
    """A script that does not compile is refused here, not after a job was billed for starting it. Where the
    job's Python is newer than this server's (JOB_PYTHON, the uv image's), this one may not read its syntax:
    then a warning. Skipped when the header asks for a Python this server is not."""
    import platform
    import sys

    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        if header.requires_python and platform.python_version() not in SpecifierSet(header.requires_python):
            return None
    except InvalidSpecifier:
        raise ValueError(f"the header's requires-python {header.requires_python!r} is not a version specifier "
                         "(e.g. \">=3.11\")") from None
    try:
        pysource.check_compiles(source, name)
    except SyntaxError as exc:
        said = f"{name} does not compile: line {exc.lineno}: {exc.msg}"
        if sys.version_info[:2] >= JOB_PYTHON:
            raise ValueError(said) from None
        return (f"{said} under this server's Python {platform.python_version()}: fine if it is newer syntax (the "
                f"job runs Python {'.'.join(map(str, JOB_PYTHON))}), a failure in the job otherwise")
    except (RecursionError, MemoryError):
        raise ValueError(f"{name} is nested too deeply for Python to compile") from None
    return None


# What a project folder's copy leaves behind: history, environments and caches (clutter), and credentials (a job
# gets its secrets as secrets, never as files). One rule for the hash, the bucket upload and the local copy; a
# credential left behind is named in the answer's warnings. A directory name may hold a '/' (two levels).
LEFT_OUT_DIRS = (".git", ".hg", ".venv", "venv", "__pycache__", "node_modules", ".ipynb_checkpoints", ".mypy_cache",
                 ".pytest_cache", ".cache")
LEFT_OUT_FILES = ("*.pyc",)
CREDENTIAL_DIRS = (".aws", ".ssh", ".gnupg", ".docker", ".kube", ".huggingface", ".azure", ".terraform",
                   ".config/gcloud", ".config/gh", ".config/huggingface")
CREDENTIAL_FILES = (
    ".env", ".env.*", "*.env", ".envrc", ".netrc", "_netrc", ".pypirc", ".npmrc", ".git-credentials", ".gitcookies",
    ".dockercfg", "*.pem", "*.key", "*.p12", "*.pfx", "*.ppk", "*.jks", "*.keystore", "credentials", "credentials.json",
    "credentials.toml", "credentials.yaml", "credentials.yml", "credentials.ini", "credentials.csv",
    "application_default_credentials.json", "client_secret*.json", "*.tfstate", "*.tfstate.*", "*.tfvars",
    "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk", "id_xmss",
    "*_rsa", "*_dsa", "*_ecdsa", "*_ed25519",  # ssh-keygen -f deploy_rsa: a private key by any name
    ".pgpass", ".my.cnf", ".mylogin.cnf", ".s3cfg", ".boto", ".databrickscfg", "rclone.conf", "kaggle.json",
    "secrets.toml", "secrets.json", "secrets.yaml", "secrets.yml", ".htpasswd", "htpasswd",
    "token", "stored_tokens",  # huggingface_hub's token files ($HF_HOME/token), wherever HF_HOME pointed
    "kubeconfig", "kubeconfig.*", "*.kubeconfig",
)
# A secret whatever the file's name, by what it holds: a PEM/OpenSSH/PGP private key anywhere in it (a key inside
# a JSON string too), a PuTTY key file, a Google service-account or user credential JSON, an AWS access key id or
# secret key setting, a Hugging Face user token ('hf_' and 34 letters); the server's own token too, whatever its form
_SECRET_CONTENT = re.compile(
    rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\A\s*PuTTY-User-Key-File-"
    rb"|\"type\"\s*:\s*\"(?:service_account|authorized_user|external_account)\"|\"private_key\"\s*:\s*\""
    rb"|(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])|(?i:aws_secret_access_key)[\"']?\s*[=:]"
    rb"|(?<![A-Za-z0-9_])hf_[A-Za-z]{34}(?![A-Za-z0-9])")
_SCAN_CHUNK = 1 << 20


def _within(folder: PurePosixPath, names: tuple[str, ...]) -> bool:
    """Whether a folder (its path inside the project) is, or is inside, one of the named folders."""
    inside = f"/{folder.as_posix()}/"
    return any(f"/{name}/" in inside for name in names)


def _named(relative: PurePosixPath, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(relative.name, pattern) for pattern in patterns)


def credential(relative: PurePosixPath) -> bool:
    """Whether a file of a project folder holds credentials by its name or folder."""
    return _within(relative.parent, CREDENTIAL_DIRS) or _named(relative, CREDENTIAL_FILES)


SECRET_OVERLAP = 128  # bytes of a chunk's end searched again with the next chunk: a marker cut by the chunk's end


def known_secrets() -> tuple[bytes, ...]:
    """The credentials this server holds, found in a file by their exact bytes (its Hugging Face token)."""
    from hf_train_mcp.hub import hub_token

    token = hub_token()
    return (token.encode(),) if token and len(token) >= 8 else ()


def marks_secret(data: bytes, known: tuple[bytes, ...] = ()) -> bool:
    """Whether a piece of a file (a chunk, after the last SECRET_OVERLAP bytes of the one before) holds the marker
    of a private key or a cloud credential, or one of the `known` secrets."""
    return _SECRET_CONTENT.search(data) is not None or any(secret in data for secret in known)


def holds_secret(path: Path) -> bool:
    """Whether a file holds credentials by its content (read whole, a chunk at a time): a private key or a cloud
    credential under a name no pattern knows ('prod-123-4f2a9c1d7e3b.json', 'notes/backup')."""
    known = known_secrets()
    with open(path, "rb") as f:
        tail = b""
        while chunk := f.read(_SCAN_CHUNK):
            if marks_secret(tail + chunk, known):
                return True
            tail = chunk[-SECRET_OVERLAP:]
    return False


def left_out(relative: PurePosixPath) -> bool:
    """Whether a file of a project folder (its path inside the folder) stays out of the job's copy by its name."""
    return _within(relative.parent, LEFT_OUT_DIRS) or _named(relative, LEFT_OUT_FILES) or credential(relative)


def folder_left_out(relative: PurePosixPath) -> str | None:
    """'credentials' or 'clutter' for a folder of the project that stays home whole, else None."""
    if _within(relative, CREDENTIAL_DIRS):
        return "credentials"
    return "clutter" if _within(relative, LEFT_OUT_DIRS) else None


def _escaped(path: str) -> str:
    """A path as an fnmatch pattern that matches it alone."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def sync_excludes(withheld: tuple[str, ...] = ()) -> list[str]:
    """The same rule as fnmatch patterns on paths inside the folder, as huggingface_hub's bucket sync reads them
    (its `*` crosses '/'), and the files withheld by what they hold (a key by another name), each by its path."""
    dirs = [pattern for name in (*LEFT_OUT_DIRS, *CREDENTIAL_DIRS) for pattern in (f"{name}/*", f"*/{name}/*")]
    files = [pattern for name in (*LEFT_OUT_FILES, *CREDENTIAL_FILES) for pattern in (name, f"*/{name}")]
    return [*dirs, *files, *(_escaped(path) + ("*" if path.endswith("/") else "") for path in withheld)]


def copy_ignore(root: str, withheld: tuple[str, ...] = ()) -> Callable[[str, list[str]], set[str]]:
    """shutil.copytree's `ignore` for the local copy of a project folder: the rule of sync_excludes."""
    top, skipped = Path(root), set(withheld)

    def ignore(folder: str, names: list[str]) -> set[str]:
        here = PurePosixPath(Path(folder).relative_to(top).as_posix())
        out = set()
        for name in names:
            relative = here / name
            whole = Path(folder, name).is_dir() and (folder_left_out(relative) or f"{relative.as_posix()}/" in skipped)
            if whole or left_out(relative) or relative.as_posix() in skipped:
                out.add(name)
        return out
    return ignore
