"""What a caller may do on this server: everything over stdio, only what the operator allowed over HTTP.

Over stdio the caller is the local user, who can read their own files and run their own code anyway. Over
HTTP the caller is whoever reaches the port: they may name local files only inside the folders the operator
listed (`--allow-local-files`), and run jobs on this machine only with `--allow-local-jobs`.
"""

import hashlib
import json
import os
import re
import stat
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hf_train_mcp.errors import AccessError


MAX_FOLDER_ENTRIES = 10_000  # a model folder's files checked one by one (a real one holds tens)
PATH_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".arrow", ".txt", ".tsv", ".gguf", ".safetensors", ".bin")


# Set while a remote caller's request runs: what names a local path is then decided by its spelling alone, so
# that a name which happens to exist in the server's working directory answers as one that does not.
_REMOTE_CALLER: ContextVar[bool] = ContextVar("remote_caller", default=False)


def looks_local(ref: str) -> bool:
    """Spelled as a path: it starts like one, has more than the one '/' of 'owner/name', or ends like a data file."""
    return (ref.startswith(("/", "./", "../", "~", ".\\")) or ref.count("/") > 1 or "\\" in ref
            or ref.lower().endswith(PATH_SUFFIXES))


def is_local(ref: str) -> bool:
    """A path on this machine rather than a Hub id: spelled as a path, or (for the local user only) existing here
    ('owner/name' that happens to exist here counts as local). A missing path is still a path: it is reported
    as not found, never looked up on the Hub."""
    return looks_local(ref) or (not _REMOTE_CALLER.get() and Path(ref).expanduser().exists())


# Characters no Hub id holds and no sane path needs, which let a caller's text pass for the server's own words in
# a question or a log line: controls, format characters (bidi overrides, zero-width, tags), separators other than
# a plain space, private-use and unassigned code points, and the blanks that render as spaces
_BLANKS = frozenset("\u115f\u1160\u2800\u3164\uffa0")
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9][A-Za-z0-9_.\-]*)?$")


def _hidden(value: str) -> bool:
    return any(ch in _BLANKS or unicodedata.category(ch) in _REFUSED_CATEGORIES
               or (unicodedata.category(ch) == "Zs" and ch != " ") for ch in value)


def check_reference(value: str) -> str:
    """A Hub id ('owner/name': ASCII letters, digits, '-', '_', '.') or a path, nothing else: what a caller names
    is shown back in questions and errors."""
    if _hidden(value):
        raise ValueError("the name holds a control, invisible or look-alike blank character: send a Hub id such as "
                         "'owner/name' or a local path")
    if not looks_local(value) and not _HUB_NAME.match(value):
        raise ValueError(f"{value[:60]!r} is not a Hub id ('owner/name' in ASCII letters, digits, '-', '_' and '.'); "
                         "a local path starts with '/', './' or '~'")
    return value


def hard_linked(path: Path) -> bool:
    """A file with more than one name: a hard link inside a folder may be a file outside it under another name."""
    try:
        info = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink > 1


def shown_name(ref: str) -> str:
    """A caller's model or dataset name as the server's own text quotes it: in quotes, cut short."""
    return repr(ref if len(ref) <= 96 else ref[:93] + "...")


# What a name in a question to the user may hold: a Hub id's, a path's, an image's or a URL's characters; no space,
# '$', '#', '?', '%' or quote, so a caller's sentence ("correction: the real maximum is $0.40") cannot pass as one
_REFERENCE = re.compile(r"^[A-Za-z0-9~/.][A-Za-z0-9._\-/~:@+=,]{0,159}$")


def question_name(ref: str) -> str:
    """A name as a question to the user shows it: a reference (a URL without its query and fragment, which are
    free text) in quotes, or, where it holds anything else, its digest; never the caller's prose."""
    if "://" in ref:
        parts = urlsplit(ref)
        ref = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
    if _REFERENCE.match(ref) and not _hidden(ref):
        return shown_name(ref)
    return f"a name with other characters (sha256 {hashlib.sha256(ref.encode()).hexdigest()[:12]})"


_HOST = re.compile(r"^[a-z0-9]([a-z0-9.\-]{0,62}[a-z0-9])?(:[0-9]{1,5})?$")


def script_reference(source: Any) -> str:
    """A run_script program as a question to the user names it: by what it is and its sha256, and a URL by its
    host too; never by a path or file name, which are the caller's words (a file may be called 'correction:the-
    real-maximum-is-0.40-USD.py')."""
    digest = f"sha256 {source.sha256[:12]}"
    if source.url:
        host = (urlsplit(source.url).netloc.rpartition("@")[2]).lower()
        return f"a script from {host} ({digest})" if _HOST.match(host) else f"a script at a URL ({digest})"
    what = ("a project folder" if source.folder else "an inline script" if source.label == "inline script"
            else "a script file" if source.text else "a Docker image's command")
    return f"{what} ({digest})"


@dataclass(frozen=True)
class Access:
    local_dirs: tuple[Path, ...] | None = None  # None: any path (stdio); () : none at all
    local_jobs: bool = True
    reward_code: bool = True
    over: str = "stdio"
    scripts: bool = True  # run_script: the caller's own code, run beside this server's token

    @classmethod
    def http(cls, *, local_dirs: list[str] | tuple[str, ...] = (), local_jobs: bool = False,
             reward_code: bool = False, scripts: bool = False) -> "Access":
        return cls(tuple(Path(d).expanduser().resolve() for d in local_dirs), local_jobs, reward_code, "HTTP",
                   scripts)

    @property
    def remote(self) -> bool:
        return self.local_dirs is not None

    def recorded(self) -> str | None:
        """What a sweep keeps of its caller's rights, so that its supervisor (another process) plans and uploads
        the later runs under them; None for the local user."""
        if not self.remote:
            return None
        return json.dumps({"local_dirs": [str(d) for d in self.local_dirs], "local_jobs": self.local_jobs,
                           "reward_code": self.reward_code, "over": self.over, "scripts": self.scripts})

    @classmethod
    def from_record(cls, text: str | None) -> "Access":
        if not text:
            return cls()
        kept = json.loads(text)
        return cls(tuple(Path(d) for d in kept["local_dirs"]), kept["local_jobs"], kept["reward_code"],
                   kept["over"], kept["scripts"])

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Run one call of this caller (in the thread that does the work)."""
        reset = _REMOTE_CALLER.set(self.remote)
        try:
            yield
        finally:
            _REMOTE_CALLER.reset(reset)

    def shown(self, path: object) -> str:
        """A server path as an error may show it: the local user sees it, a remote caller never does."""
        return "(a folder on the server)" if self.remote else str(path)

    def check_derived(self, ref: str | None, kind: str, source: str) -> None:
        """Refuse a local path that this server found (in the ledger, an adapter's config) rather than the caller
        sent, when the caller could not have named it: the same rule as check_ref, without showing the path."""
        if self.may_read(ref, whole="model" in kind):
            return
        raise AccessError(f"{source} reads a local {kind} outside the folders callers over {self.over} may use, so "
                         "this server will not run it for you; ask the operator, or work on a model pushed to the Hub")

    def allows_path(self, path: Path) -> bool:
        """Inside the allowed folders however it is spelled: symlinks and '..' cannot lead outside, and a file with
        other names (a hard link) is refused, since nothing tells whether one of them lies outside."""
        if self.local_dirs is None:
            return True
        resolved = path.expanduser().resolve()
        return any(resolved.is_relative_to(folder) for folder in self.local_dirs) and not hard_linked(resolved)

    def may_read(self, ref: str | None, *, whole: bool = False) -> bool:
        """A Hub id, or a path this caller may read. '..' is refused before anything looks at the disk, so an
        answer never tells which paths exist. whole: a folder the job reads every file of (a model's), so each
        entry must be one this caller may read too (a Hub cache snapshot links to blobs elsewhere)."""
        if ref is None or not self.remote:
            return True
        if ".." in PurePath(ref).parts:
            return False
        if not is_local(ref):
            return True
        path = Path(ref)
        return self.allows_path(path) and not (whole and path.expanduser().is_dir() and not self._all_inside(path))

    def _all_inside(self, folder: Path) -> bool:
        """Every entry of the folder, linked folders followed (each once), is one this caller may read."""
        seen, count = set(), 0
        for root, folders, files in os.walk(folder.expanduser(), followlinks=True):
            real = os.path.realpath(root)
            if real in seen:  # a link back up: walked already
                folders[:] = []
                continue
            seen.add(real)
            count += len(folders) + len(files)
            if count > MAX_FOLDER_ENTRIES or not all(self.allows_path(Path(root, name)) for name in folders + files):
                return False
        return True

    def check_ref(self, ref: str | None, kind: str) -> None:
        """Refuse a local model/dataset path outside the allowed folders (a Hub id always passes); a model folder's
        every file, which its job loads, too."""
        if self.may_read(ref, whole="model" in kind):
            return
        where = ("no local folder is allowed" if not self.local_dirs
                 else "only inside the folders the operator allowed, and no file with other names (a hard link); "
                 f"every file of a model folder too, at most {MAX_FOLDER_ENTRIES:,} of them")
        raise AccessError(f"{kind} {ref!r} is a path on the server, which callers over {self.over} may not read "
                         f"({where}; the operator adds one with --allow-local-files DIR). Send a Hub id instead.")

    def check_reward_code(self) -> None:
        if not self.reward_code:
            raise AccessError(f"reward_code is code that runs inside the job, next to this server's Hugging Face token, "
                             f"which callers over {self.over} may not send unless the operator starts the server "
                             "with --allow-reward-code; use the built-in reward_funcs instead")

    def check_scripts(self) -> None:
        if not self.scripts:
            raise AccessError(f"run_script runs your own code in a job, next to this server's Hugging Face token, "
                              f"which callers over {self.over} may not do unless the operator starts the server with "
                              "--allow-scripts; use submit_training instead. Nothing was launched.")

    def check_model_code(self, ref: str, modules: list[str]) -> None:
        """A model folder whose own Python the job would import (sentence-transformers modules of its own): code of
        the caller's choosing, as run_script's is."""
        if not self.remote or self.scripts or not modules:
            return
        named = ", ".join(repr(name[:60]) for name in sorted(set(modules))[:3])
        raise AccessError(f"model {shown_name(ref)} names module classes of its own in modules.json ({named}), "
                          "whose Python the job would run next to this server's Hugging Face token, which callers "
                          f"over {self.over} may not do unless the operator starts the server with --allow-scripts: "
                          "keep sentence_transformers.* modules only, or send a Hub model. Nothing was launched.")

    def check_path(self, ref: str, kind: str) -> None:
        """A script file or project folder the caller names: over HTTP, an absolute path inside the folders the
        operator allowed (a relative one would resolve against the server's working directory)."""
        if not self.remote:
            return
        path = PurePath(ref)
        if path.is_absolute() and ".." not in path.parts and self.allows_path(Path(ref)):
            return
        where = ("no local folder is allowed" if not self.local_dirs
                 else "only absolute paths inside the folders the operator allowed, and no hard-linked file")
        raise AccessError(f"{kind} {ref[:120]!r} is a path on the server, which callers over {self.over} may not "
                          f"read ({where}; the operator adds one with --allow-local-files DIR). Send the script's "
                          "source or an https URL instead.")

    def check_local_jobs(self, *, backend: str, instead: str) -> None:
        """Refuse a backend that runs code on this machine (named, with what to send instead, by the caller:
        backends.check_permission) unless the operator allowed it."""
        if not self.local_jobs:
            raise AccessError(f"backend={backend!r} runs code on the server, which callers over {self.over} may not "
                              f"do unless the operator starts it with --allow-local-jobs; send {instead} "
                              "(with a token on the server) instead")


STDIO = Access()
