"""What a Hugging Face Jobs job runs: its image, its command (the script decoded from its environment, then `uv
run` or, across GPUs, `accelerate launch`), and the environment that carries the script inline."""

import base64
import shlex

from hf_train_mcp.backends.base import JobSpec, UserRun
from hf_train_mcp.errors import TrainError
from hf_train_mcp.nodes import rendezvous
from hf_train_mcp.rendering.script import Script

UV_IMAGE = "ghcr.io/astral-sh/uv:python3.12-bookworm"
VENV = "/tmp/venv"
SCRIPT_ENV = "HFTM_SCRIPT_B64"
SCRIPT_PATH = "/tmp/train.py"
USER_SCRIPT = "/tmp/script.py"  # run_script's inline source, decoded in the job
FOLDER_MOUNT = "/code"  # run_script's folder: mounted read-only here, copied to WORKDIR and run there
WORKDIR = "/tmp/project"
# Linux caps one argv/env string at 128 KiB (MAX_ARG_STRLEN), "NAME=" included; keep a margin.
MAX_INLINE_CHARS = 128 * 1024 - len(SCRIPT_ENV) - 1024


def uv_argv(run: UserRun, target: str) -> list[str]:
    """`uv run` of a script, as run_uv_job builds it: every value its own argv item, never shell text."""
    return ["uv", "run", *(x for dep in run.dependencies for x in ("--with", dep)), target, *run.script_args]


def user_command(run: UserRun) -> list[str]:
    """A run_script job's command. A URL or image command runs as sent; an inline script is decoded first, a
    folder copied to a writable place first (its mount is read-only), and then the argv runs through
    `exec "$@"`, so that no argument is ever parsed by the shell."""
    target = USER_SCRIPT if run.script is not None else run.url or run.entry or ""
    argv = list(run.command) if run.command else uv_argv(run, target)
    steps = []
    if run.script is not None:
        steps.append(f'printf %s "${SCRIPT_ENV}" | base64 -d > {USER_SCRIPT}')
    if run.folder:
        steps.append(f"cp -r {FOLDER_MOUNT} {WORKDIR} && cd {WORKDIR}")
    if not steps:
        return argv
    return ["/bin/sh", "-c", " && ".join(steps) + ' && exec "$@"', "sh", *argv]


def _inline(script: Script, advice: str) -> str:
    encoded = base64.b64encode(script.text.encode()).decode()
    if len(encoded) > MAX_INLINE_CHARS:
        raise TrainError(f"the script is {len(script.text)} bytes, over the {MAX_INLINE_CHARS * 3 // 4} bytes that "
                         f"fit inline in a job; {advice}")
    return encoded


def image(spec: JobSpec) -> str:
    return (spec.run.image if spec.run else None) or UV_IMAGE


def command(spec: JobSpec) -> list[str]:
    """The job's argv: the caller's program (run_script), else the rendered script decoded and run."""
    if spec.run is not None:
        return user_command(spec.run)
    decode = f'printf %s "${SCRIPT_ENV}" | base64 -d > {SCRIPT_PATH}'
    if spec.gpus > 1 or spec.nodes > 1:
        # uv cannot hand a PEP 723 environment to `accelerate launch`: install the header's own pins into a
        # venv and launch from it, so multi-GPU jobs run exactly the versions single-GPU jobs do.
        pins = " ".join(shlex.quote(d) for d in spec.dependencies)
        launch = (rendezvous.shell_words(rendezvous.launcher_args(
            nodes=spec.nodes, rank=spec.node_rank, gpus=spec.gpus, full=spec.full,
            shared_output=bool(spec.output_bucket)))
            if spec.nodes > 1 else f"--num_processes {spec.gpus}")
        run = (f"uv venv -q {VENV} && uv pip install -q --python {VENV}/bin/python {pins} && "
               f"exec {VENV}/bin/accelerate launch {launch} {SCRIPT_PATH}")
    else:
        run = f"exec uv run {SCRIPT_PATH}"
    return ["/bin/sh", "-c", f"{decode} && {run}"]


def environment(script: Script, spec: JobSpec | None = None) -> dict[str, str]:
    """The job's variables: the script inline (never a secret), and no progress bars in its log."""
    if spec is not None and spec.run is not None:  # the caller's variables, bars left on
        inline = {SCRIPT_ENV: _inline(script, "send it as an https URL or in a folder")} \
            if spec.run.script is not None else {}
        return {**dict(spec.run.env), **inline, "PYTHONUNBUFFERED": "1"}
    return {SCRIPT_ENV: _inline(script, "shorten reward_code"), "PYTHONUNBUFFERED": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
