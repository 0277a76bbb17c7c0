"""What a caller may do on this server: everything over stdio, only what the operator allowed over HTTP.

Over stdio the caller is the local user, who can read their own files and run their own code anyway. Over
HTTP the caller is whoever reaches the port: they may name local files only inside the folders the operator
listed (`--allow-local-files`), and run jobs on this machine only with `--allow-local-jobs`.
"""

from dataclasses import dataclass
from pathlib import Path, PurePath

from hf_train_mcp.errors import TrainError


PATH_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".arrow", ".txt", ".tsv", ".gguf", ".safetensors", ".bin")


def is_local(ref: str) -> bool:
    """A path on this machine rather than a Hub id: it starts like a path, has more than the one '/' of
    'owner/name', ends like a data file, or exists here ('owner/name' that happens to exist here counts as local).
    A missing path is still a path: it is reported as not found, never looked up on the Hub."""
    return (ref.startswith(("/", "./", "../", "~", ".\\")) or ref.count("/") > 1 or "\\" in ref
            or ref.lower().endswith(PATH_SUFFIXES) or Path(ref).expanduser().exists())


@dataclass(frozen=True)
class Access:
    local_dirs: tuple[Path, ...] | None = None  # None: any path (stdio); () : none at all
    local_jobs: bool = True
    reward_code: bool = True
    over: str = "stdio"

    @classmethod
    def http(cls, *, local_dirs: list[str] | tuple[str, ...] = (), local_jobs: bool = False,
             reward_code: bool = False) -> "Access":
        return cls(tuple(Path(d).expanduser().resolve() for d in local_dirs), local_jobs, reward_code, "HTTP")

    @property
    def remote(self) -> bool:
        return self.local_dirs is not None

    def allows_path(self, path: Path) -> bool:
        if self.local_dirs is None:
            return True
        resolved = path.expanduser().resolve()  # symlinks and '..' cannot lead outside
        return any(resolved.is_relative_to(folder) for folder in self.local_dirs)

    def check_ref(self, ref: str | None, kind: str) -> None:
        """Refuse a local model/dataset path outside the allowed folders (a Hub id always passes)."""
        if ref is None or not self.remote:
            return
        # '..' is refused before anything looks at the disk, so an answer never tells which paths exist
        if ".." not in PurePath(ref).parts and (not is_local(ref) or self.allows_path(Path(ref))):
            return
        where = ("no local folder is allowed" if not self.local_dirs
                 else "allowed folders: " + ", ".join(str(d) for d in self.local_dirs))
        raise TrainError(f"{kind} {ref!r} is a path on the server, which callers over {self.over} may not read "
                         f"({where}; the operator adds one with --allow-local-files DIR). Send a Hub id instead.")

    def check_reward_code(self) -> None:
        if not self.reward_code:
            raise TrainError(f"reward_code is code that runs inside the job, next to this server's Hugging Face token, "
                             f"which callers over {self.over} may not send unless the operator starts the server "
                             "with --allow-reward-code; use the built-in reward_funcs instead")

    def check_local_jobs(self) -> None:
        if not self.local_jobs:
            raise TrainError(f"backend='local' runs code on the server, which callers over {self.over} may not do "
                             "unless the operator starts it with --allow-local-jobs; send backend='hf' "
                             "(with a token on the server) instead")


STDIO = Access()
