"""run_script's plan: the caller's program (inline source, URL, local file, project folder, or image + command)
read, its `[tool.hf-jobs]` header applied under the call, its worst case held to the budgets, and the advice its
library's recipe gives. A ScriptPlan has what the launcher asks of any plan, so the job goes through the same
launch, ledger and follow path as a training run.
"""

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from hf_train_mcp import backends

from hf_train_mcp.user_scripts import recipes
from hf_train_mcp.access import Access
from hf_train_mcp.backends.base import JobSpec, UserRun
from hf_train_mcp.planning.budget import within_budget, worst_case_usd
from hf_train_mcp.durations import parse_duration
from hf_train_mcp.errors import AccessError, TrainError
from hf_train_mcp.estimate.hardware import Catalog
from hf_train_mcp.rendering.script import Script
from hf_train_mcp.contract.requests import ScriptRequest
from hf_train_mcp.contract.results import FLAVORS
from hf_train_mcp.planning.user_script_source import Source
from hf_train_mcp.user_scripts.source import Header, check_syntax
from hf_train_mcp.user_scripts.source import read_header

DEFAULT_FLAVOR = "cpu-basic"  # what Jobs runs without --flavor
DEFAULT_TIMEOUT_S = 1800  # what Jobs gives a job without --timeout
MOUNTED_AT = "/code/"  # where the Hub's docs mount a project folder (a command may name its files so)
_ARG_FILE_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".toml", ".json", ".jsonl", ".csv", ".txt")


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


def _withheld_warning(withheld: list[str]) -> list[str]:
    if not withheld:
        return []
    shown = ", ".join(withheld[:20]) + (f" and {len(withheld) - 20} more" if len(withheld) > 20 else "")
    return [f"left out of the folder's copy as credentials: {shown} (a job gets credentials as secrets=[...], "
            "never as files)"]


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
        raise TrainError(f"the header's flavor {flavor!r} is not in the hardware catalog; list_hardware lists its flavors")
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
