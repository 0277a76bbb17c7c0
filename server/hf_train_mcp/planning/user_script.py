"""run_script's plan: the caller's program (inline source, URL, local file, project folder, or image + command)
read, its `[tool.hf-jobs]` header applied under the call, its worst case held to the budgets, and the advice its
library's recipe gives. A ScriptPlan has what the launcher asks of any plan, so the job goes through the same
launch, ledger and follow path as a training run.
"""

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from hf_train_mcp import backends

from hf_train_mcp.user_scripts import recipes
from hf_train_mcp.access import Access
from hf_train_mcp.backends.base import JobSpec, UserRun
from hf_train_mcp.planning.budget import within_budget, worst_case_usd
from hf_train_mcp.durations import parse_duration
from hf_train_mcp.errors import AccessError, NotFoundError, TrainError
from hf_train_mcp.estimate.hardware import Catalog
from hf_train_mcp.rendering.script import Script
from hf_train_mcp.contract.requests import ScriptRequest
from hf_train_mcp.contract.results import FLAVORS
from hf_train_mcp.user_scripts.urls import fetch_script
from hf_train_mcp.user_scripts.source import Header, check_syntax, credential, folder_left_out, holds_secret, left_out
from hf_train_mcp.user_scripts.source import read_header
from hf_train_mcp.user_scripts.source import source_kind

DEFAULT_FLAVOR = "cpu-basic"  # what Jobs runs without --flavor
DEFAULT_TIMEOUT_S = 1800  # what Jobs gives a job without --timeout
SCANNED_SUFFIXES = (".py", ".yml", ".yaml", ".toml", ".json", ".cfg", ".sh")
SCANNED_MAX_BYTES = 256 * 1024
MAX_FOLDER_FILES = 5000  # a project folder's copy: code and configs, not a dataset
MAX_FOLDER_BYTES = 1 * 2**30
MOUNTED_AT = "/code/"  # where the Hub's docs mount a project folder (a command may name its files so)
_ARG_FILE_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".toml", ".json", ".jsonl", ".csv", ".txt")


@dataclass(frozen=True)
class Source:
    """What the job runs, as the server read it."""

    text: str  # the script's source ('' for an image's command)
    sha256: str  # of the script, or of the whole folder, or of image + command
    label: str  # what list_jobs shows as its model column
    url: str | None = None
    folder: str | None = None  # resolved
    scanned: str = ""  # text searched for how the output leaves the job (source, the folder's configs)
    withheld: tuple[str, ...] = ()  # a folder's credential files (paths inside it), left behind


@dataclass
class ScriptPlan:
    request: ScriptRequest
    backend: str
    flavor: str
    gpus: int
    timeout_seconds: int
    worst_case_cost_usd: float | None
    namespace: str | None
    run: UserRun
    source: Source
    warnings: list[str] = field(default_factory=list)
    usd_per_hour: float | None = None
    estimate: None = None
    effective_batch_size: int = 0
    trackio_space_id: None = None
    output_bucket: None = None
    dependencies: list[str] = field(default_factory=list)
    config: dict = field(default_factory=lambda: {"method": "script", "output_dir": None})

    @property
    def method(self) -> str:
        return "script"

    def render(self) -> Script:
        return Script(self.source.text, self.source.sha256)

    def job_spec(self, kind: str = "script") -> JobSpec:
        request_hash = hashlib.sha256(self.request.model_dump_json().encode()).hexdigest()[:12]
        return JobSpec(method="script", flavor=self.flavor, gpus=self.gpus, timeout_seconds=self.timeout_seconds,
                       labels={"hf-train-mcp": "1", "method": "script", "request": request_hash, "kind": kind},
                       dependencies=list(self.run.dependencies), namespace=self.namespace, run=self.run)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _names(path: Path, relative: PurePosixPath, folder: Path) -> tuple[PurePosixPath, ...]:
    """The paths an entry of the folder is judged by: its own, and a link's target's (its path inside the folder,
    or its absolute path outside): a link is another name for its target, which stays home under any name."""
    if not path.is_symlink():
        return (relative,)
    target = path.resolve()
    inside = target.is_relative_to(folder)
    return relative, PurePosixPath(target.relative_to(folder).as_posix() if inside else target.as_posix())


def _fate(path: Path, relative: PurePosixPath, folder: Path, access: Access) -> str | None:
    """Why a file stays out of the folder's copy ('clutter', 'credentials'), or None when it travels. Over HTTP a
    link out of the folders the operator allowed or a file with other names (a hard link) is refused: either may
    be a file outside them."""
    names = _names(path, relative, folder)
    if any(credential(name) for name in names):
        return "credentials"
    if left_out(relative):
        return "clutter"
    if not access.allows_path(path):
        raise AccessError(f"the folder holds {relative.as_posix()!r}, a link out of the folders you may use or a "
                          f"file with other names (a hard link), which callers over {access.over} may not send: copy "
                          "the file in instead. Nothing was launched.")
    return "credentials" if holds_secret(path) else None


def _folder_fate(path: Path, relative: PurePosixPath, folder: Path, access: Access) -> str | None:
    """Why a folder of the project stays home whole ('clutter', 'credentials'; a link judged by its target too),
    or None."""
    why = next((fate for name in _names(path, relative, folder) if (fate := folder_left_out(name))), None)
    if why is None and not access.allows_path(path):
        raise AccessError(f"the folder holds {relative.as_posix()!r}, a link out of the folders you may use, which "
                          f"callers over {access.over} may not send: copy what it holds in instead. Nothing was "
                          "launched.")
    return why


def _folder_files(folder: Path, access: Access) -> tuple[list[Path], list[str]]:
    """The files a folder's copy holds, within the caps of an upload, and the credentials it leaves behind (paths
    inside the folder; a folder of them as 'name/'). Left-out folders are not walked."""
    files, withheld, size = [], [], 0
    for top, folders, names in os.walk(folder):  # does not follow linked folders (nor does the sync)
        here = PurePosixPath(Path(top).relative_to(folder).as_posix())
        for name in sorted(folders):
            why = _folder_fate(Path(top, name), here / name, folder, access)
            if why:
                folders.remove(name)
                withheld += [f"{(here / name).as_posix()}/"] if why == "credentials" else []
        for name in sorted(names):
            path, relative = Path(top, name), here / name
            if not path.is_file():
                continue
            why = _fate(path, relative, folder, access)
            if why:
                withheld += [relative.as_posix()] if why == "credentials" else []
                continue
            files.append(path)
            size += path.stat().st_size
            if len(files) > MAX_FOLDER_FILES or size > MAX_FOLDER_BYTES:
                raise TrainError(f"the folder holds over {MAX_FOLDER_FILES} files or {MAX_FOLDER_BYTES // 2**30} GiB "
                                 "(its copy is uploaded for each new version): keep code and configs in it, and put "
                                 "data and weights in a dataset, model repo or bucket the script reads. Nothing was "
                                 "launched.")
    return sorted(files), withheld


def _withheld_warning(withheld: list[str]) -> list[str]:
    if not withheld:
        return []
    shown = ", ".join(withheld[:20]) + (f" and {len(withheld) - 20} more" if len(withheld) > 20 else "")
    return [f"left out of the folder's copy as credentials: {shown} (a job gets credentials as secrets=[...], "
            "never as files)"]


def _folder_source(req: ScriptRequest, access: Access) -> Source:
    folder = Path(req.folder).expanduser().resolve()
    if not folder.is_dir():
        raise NotFoundError(f"folder {access.shown(req.folder)!r} is not a folder on this machine")
    files, withheld = _folder_files(folder, access)
    digest, scanned = hashlib.sha256(), []
    for path in files:
        data = path.read_bytes()
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + hashlib.sha256(data).digest())
        if path.suffix in SCANNED_SUFFIXES and len(data) <= SCANNED_MAX_BYTES:
            scanned.append(data.decode(errors="replace"))
    text = ""
    if req.script is not None:
        entry = folder / req.script
        if entry not in files or not entry.resolve().is_relative_to(folder):
            raise NotFoundError(f"folder has no {req.script!r}: script is the entry file's path inside the folder")
        text = entry.read_text()
    return Source(text, digest.hexdigest(), f"{folder.name}/{req.script or ''}".rstrip("/"), folder=str(folder),
                  scanned="\n".join(scanned), withheld=tuple(withheld))


def read_source(req: ScriptRequest, access: Access) -> Source:
    """The program as the server reads it: a URL fetched (under script_urls' rules), a local file read."""
    if req.folder:
        return _folder_source(req, access)
    if req.script is None:
        program = json.dumps([req.image, *(req.command or [])])
        return Source("", _digest(program), req.image or "command")
    kind = source_kind(req.script)
    if kind == "url":
        url = req.script.strip()
        text = fetch_script(url, remote=access.remote)
        return Source(text, _digest(text), url, url=url, scanned=text)
    if kind == "path":
        path = Path(req.script).expanduser()
        if not path.is_file():
            raise NotFoundError(f"script {access.shown(req.script)!r} is not a file on this machine")
        text = path.read_text()
        return Source(text, _digest(text), path.name, scanned=text)
    return Source(req.script, _digest(req.script), "inline script", scanned=req.script)


def local_content(req: object, access: Access, source: Source | None = None) -> str | None:
    """The hash of the local folder or file a run_script call names (read again unless `source` is its read):
    a retry with its key is held to it (retries.asked_json). None for anything else, or once it is gone."""
    if not isinstance(req, ScriptRequest) or not (req.folder or (req.script is not None
                                                                 and source_kind(req.script) == "path")):
        return None
    try:
        return (source or read_source(req, access)).sha256
    except TrainError:
        return None


def _header(source: Source, warnings: list[str]) -> Header:
    """The script's header, once the script is known to compile (an image's command has no script)."""
    try:
        header = read_header(source.text)
        said = check_syntax(source.text, header, source.label) if source.text else None
        warnings += [said] if said else []
        return header
    except ValueError as exc:
        raise TrainError(f"{exc}. Nothing was launched.") from None


def _secrets(req: ScriptRequest, header: Header, source: Source, access: Access, *, token_always: bool
             ) -> tuple[str, ...]:
    """The call's secrets (or else the header's), and on Jobs HF_TOKEN always (the job's way to the Hub); a job
    on this machine gets HF_TOKEN only when they name it, as a training job here gets it only for gated or private
    data. A URL's header does not choose which of the server's credentials its code gets: whoever controls the
    URL wrote it, not the caller. Over HTTP no other secret of the server's environment is handed to a caller's
    code."""
    named = req.secrets if req.secrets is not None else header.jobs.get("secrets", [])
    out = tuple(dict.fromkeys(["HF_TOKEN", *named] if token_always else named))
    extra = [name for name in out if name != "HF_TOKEN"]
    chosen = [name for name in out if name in named]  # what the header would pick (HF_TOKEN too, here)
    if source.url and req.secrets is None and (extra or (chosen and not token_always)):
        raise TrainError(f"the script at the URL asks for secrets {', '.join(extra or chosen)} in its [tool.hf-jobs] "
                         "header: a URL's header does not pick your credentials. Send secrets=[...] naming the ones "
                         f"to hand it{' (HF_TOKEN is always sent)' if token_always else ''}, or secrets=[] for none. "
                         "Nothing was launched.")
    if extra and access.remote:
        raise AccessError(f"secrets {', '.join(extra)} would hand this server's own credentials to your code; callers "
                          f"over {access.over} get HF_TOKEN only. Nothing was launched.")
    return out


def _header_applied(req: ScriptRequest, header: Header) -> list[str]:
    """Say which launch settings the script's header chose (the call left them out): the job's price and reach
    follow them, and a fetched script's header is someone else's choice."""
    applied = {key: value for key, value in header.jobs.items() if getattr(req, key, None) is None}
    if not applied:
        return []
    shown = ", ".join(f"{key}={value!r}" for key, value in sorted(applied.items()))
    return [f"from the script's [tool.hf-jobs] header: {shown} (send them in the call to choose otherwise)"]


def _flavor_and_timeout(req: ScriptRequest, header: Header, default_timeout_s: int) -> tuple[str, int]:
    flavor = req.flavor or header.jobs.get("flavor") or DEFAULT_FLAVOR
    if flavor not in FLAVORS:
        raise TrainError(f"the header's flavor {flavor!r} is not a Jobs flavor; list_hardware lists them")
    timeout = req.timeout
    if timeout is None and "timeout" in header.jobs:
        try:
            timeout = parse_duration(header.jobs["timeout"])
        except ValueError as exc:
            raise TrainError(f"the header's [tool.hf-jobs] timeout: {exc}") from None
    return flavor, timeout or default_timeout_s


def _placement(req: ScriptRequest, header: Header, backend: str, catalog: Catalog,
               warnings: list[str]) -> tuple[str, int, float | None, int]:
    """(flavor, timeout, $/hour, GPUs), the timeout held to max_cost_usd and the operator's cap."""
    where = backends.traits(backend)
    # Jobs' own default without --timeout; a run here is free, so it gets the backend's longer one
    flavor, timeout = _flavor_and_timeout(req, header, DEFAULT_TIMEOUT_S if where.bills else where.default_timeout_s)
    if not where.chooses_flavor:  # one hardware of its own
        from hf_train_mcp.backends.local import has_cuda

        if req.flavor or header.jobs.get("flavor"):
            warnings.append(f"flavor {flavor!r} is ignored by backend={backend!r}")
        return where.flavor(cuda=has_cuda()), within_budget(req, flavor, 0.0, timeout, None, warnings), 0.0, 1
    info = catalog.flavors.get(flavor)
    price = info.usd_per_hour if info else None
    if not where.bills:
        price = 0.0
    return flavor, within_budget(req, flavor, price, timeout, None, warnings), price, info.gpus if info else 1


def plan_script(req: ScriptRequest, source: Source, *, backend: str, catalog: Catalog, namespace: str | None,
                access: Access) -> ScriptPlan:
    warnings: list[str] = []
    header = _header(source, warnings)
    where = backends.traits(backend)
    image = req.image or header.jobs.get("image")
    if image and not where.runs_images:
        if req.image:
            raise TrainError(f"backend={backend!r} runs scripts, not Docker images: drop image, or send "
                             f"{where.words.instead}. "
                             "Nothing was launched.")
        warnings.append(f"the header's image {image!r} is ignored by backend={backend!r}")
        image = None
    secrets = _secrets(req, header, source, access, token_always=where.pushes_to_hub)
    warnings += _header_applied(req, header)
    flavor, timeout, price, gpus = _placement(req, header, backend, catalog, warnings)
    recipe = recipes.recognise(url=source.url, image=image)
    dependencies = list(req.dependencies or [])
    if recipe and recipe.headerless_with and req.script is not None and not header.present and not dependencies:
        dependencies = list(recipe.headerless_with)
        warnings.append(f"the {recipe.name} script has no `# /// script` header: added the dependencies its docs "
                        f"call for with --with ({', '.join(dependencies)}); send dependencies to choose them")
    here = where.reads_local_paths  # a job on this machine runs the text the server read, even a URL's
    inline = req.script is not None and not source.folder and (source.url is None or here)
    run = UserRun(script=source.text if inline else None, url=None if here else source.url,
                  entry=req.script if source.folder else None,
                  script_args=tuple(req.script_args), dependencies=tuple(dependencies), image=image,
                  command=tuple(req.command) if req.command else None, env=tuple((req.env or {}).items()),
                  secrets=secrets, folder=source.folder,
                  folder_name=_bucket_place(source), withheld=source.withheld)
    warnings += advice(req, source, run, recipe, gpus=gpus, pushes=where.pushes_to_hub)
    warnings += _withheld_warning(list(source.withheld))
    if here:
        warnings += _without_uv(run, header)
    else:
        check_arg_files(req, access)
    return ScriptPlan(request=req, backend=backend, flavor=flavor, gpus=gpus, timeout_seconds=timeout,
                      worst_case_cost_usd=None if price is None else round(worst_case_usd(timeout, price), 2),
                      namespace=namespace, run=run, source=source, warnings=warnings, usd_per_hour=price,
                      dependencies=dependencies)


def _bucket_place(source: Source) -> str | None:
    """A folder's place in the jobs-artifacts bucket: its name made path-safe, and its content's hash."""
    if not source.folder:
        return None
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(source.folder).name).strip("-.")[:64] or "folder"
    return f"hf-train-mcp/{name}-{source.sha256[:12]}"


def _without_uv(run: UserRun, header: Header) -> list[str]:
    """A run here without uv uses this server's Python: what the script asks to have installed is not."""
    import shutil

    wanted = [*header.dependencies, *run.dependencies]
    if run.command or not wanted or shutil.which("uv"):
        return []
    return [f"uv is not installed here, so the script runs with this server's Python and its dependencies "
            f"({', '.join(wanted[:6])}{', ...' if len(wanted) > 6 else ''}) are not installed for it: install uv "
            "(`pip install uv`) to have them provisioned, or install them yourself"]


def check_arg_files(req: ScriptRequest, access: Access) -> None:
    """A job on the Hub's machines cannot see a file of this one that an argument names: say so before it
    fails there (the folder= form takes the files along)."""
    if access.remote or req.folder:
        return
    for arg in req.script_args:
        if arg.lower().endswith(_ARG_FILE_SUFFIXES) and Path(arg).expanduser().is_file():
            raise TrainError(f"script_args names {arg!r}, a file on this machine that the job cannot see: put the "
                             "script and its files in a folder and send folder= (with script='<entry>.py')")


def _launched_right(run: UserRun, recipe: recipes.Recipe | None) -> bool:
    if recipe and recipe.launches_itself:
        return True
    head = [Path(word).name for word in (run.command or ())[:4]]
    return any(word in recipes.LAUNCHERS or word.startswith("torch.distributed") for word in head)


def _config_warnings(source: Source, run: UserRun, recipe: recipes.Recipe) -> list[str]:
    """A recipe whose config files push (Axolotl's YAML): each config the command names is checked for the keys."""
    out = []
    for arg in run.command or ():
        name = arg.removeprefix(MOUNTED_AT)
        if not source.folder or not name.endswith((".yml", ".yaml")):
            continue
        path = (Path(source.folder) / name).resolve()
        if not path.is_relative_to(source.folder) or not path.is_file():
            continue  # a config outside the folder is not the job's to read (nor the server's to show)
        text = path.read_text(errors="replace")
        missing = [key for key in recipe.config_keys if not re.search(rf"(?m)^{re.escape(key)}\s*:", text)]
        if missing:
            out.append(f"{name} sets no {', '.join(missing)}: {recipe.advice}")
        if not any(re.search(rf"(?m)^{re.escape(cap)}\s*:", text) for cap in recipe.smoke_caps):
            out.append(f"{name} sets no {'/'.join(recipe.smoke_caps)}: cap a first run (e.g. max_steps: 20), then "
                       "remove it for the full run")
    return out


def advice(req: ScriptRequest, source: Source, run: UserRun, recipe: recipes.Recipe | None, *, gpus: int,
           pushes: bool) -> list[str]:
    """What the Hub's guide warns about before a long run, for this program."""
    out = []
    argv = " ".join([*run.script_args, *(run.command or ())])
    if source.url and recipes.MOVING_URL.search(source.url):
        out.append("the script URL follows a branch: a re-run may fetch other code; pin a commit in the URL")
    if run.image and (":" not in run.image.rsplit("/", 1)[-1] or run.image.endswith(":latest")):
        out.append(f"image {run.image!r} is not pinned to a tag: a re-run may get other software; pin one")
    if gpus > 1 and not _launched_right(run, recipe):
        out.append(f"{req.flavor or 'this flavor'} has {gpus} GPUs but a plain `python`/`uv run` starts one process "
                   "(one GPU): use a launcher, e.g. image='huggingface/trl' with command=['accelerate', 'launch', "
                   f"'--num_processes', '{gpus}', ...] or torchrun --nproc_per_node {gpus}")
    scanned = f"{source.scanned}\n{argv}"
    if pushes and not any(marker in scanned for marker in recipes.PUSH_MARKERS):
        out.append("nothing in the script, its arguments or its config pushes the result (push_to_hub, --output-repo, "
                   "hub_model_id) and no bucket is mounted: the job's disk is deleted when it ends"
                   + (f". {recipe.advice}" if recipe else ""))
    if recipe and recipe.config_keys:
        out += _config_warnings(source, run, recipe)
    elif recipe and not any(cap in argv for cap in recipe.smoke_caps):
        out.append(f"no smoke-test cap ({', '.join(recipe.smoke_caps)}) in the arguments: {recipe.advice}")
    return out
