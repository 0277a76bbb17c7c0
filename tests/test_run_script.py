"""run_script: the caller's own code (inline PEP 723 source, a URL, a local file or folder, an image + command) as
a first-class job. Each reaches the Jobs emulator as exactly one job, with the token only as a secret and the
script's [tool.hf-jobs] header honoured, and is followed by job_status; the guardrails of submit_training hold."""

import json
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.access import Access
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.user_scripts.recipes import recognise
from hf_train_mcp.contract.requests import ScriptRequest
from hf_train_mcp.user_scripts.source import read_header, source_kind
from tests.conftest import WRITE_TOKEN
from tests.emulator import Emulator, JobPlan
from tests.helpers import call, call_once, decoded_script, finished, refused

pytestmark = pytest.mark.anyio

HEADED = '''# /// script
# dependencies = ["trl>=1.0"]
#
# [tool.hf-jobs]
# flavor  = "a10g-small"
# timeout = "1h"
# secrets = ["HF_TOKEN"]
# ///
from trl import SFTTrainer  # trainer.push_to_hub() at the end
print("training")
'''
TRAINER_LINES = [" 50%|#####     | 5/10 [00:01<00:01,  4.00it/s]", "{'loss': 1.25, 'learning_rate': 1e-05, 'epoch': 0.5}",
                 "100%|##########| 10/10 [00:02<00:00,  4.00it/s]", "{'train_runtime': 2.5, 'train_loss': 1.1, 'epoch': 1.0}"]
QUICK = dict(scheduling_s=0.0, running_s=0.2)


def only_job(hub: Emulator, before: int) -> dict:
    posted = hub.posted_jobs()[before:]
    assert len(posted) == 1, posted
    return posted[0]


def token_nowhere_but_secrets(spec: dict, *answers: object) -> None:
    assert spec["secrets"] == {"HF_TOKEN": WRITE_TOKEN}
    outside = {k: v for k, v in spec.items() if k != "secrets"}
    assert WRITE_TOKEN not in json.dumps(outside)
    for answer in answers:
        assert WRITE_TOKEN not in json.dumps(answer, default=str)


# --- reading a script ---------------------------------------------------------------------------------------------
def test_the_header_and_its_jobs_table_are_read() -> None:
    header = read_header(HEADED)
    assert header.present and header.dependencies == ("trl>=1.0",)
    assert header.jobs == {"flavor": "a10g-small", "timeout": "1h", "secrets": ["HF_TOKEN"]}
    assert not read_header("print('no header')\n").present
    with pytest.raises(ValueError, match="not read by run_script"):
        read_header("# /// script\n# [tool.hf-jobs]\n# gpus = 2\n# ///\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        read_header("# /// script\n# dependencies = [\n# ///\n")


def test_a_script_is_told_apart_by_its_spelling() -> None:
    assert source_kind("https://example.com/train.py") == "url"
    assert source_kind("./train.py") == source_kind("train.py") == "path"
    assert source_kind("print('hi')") == source_kind("import os\nprint(os.getcwd())\n") == "inline"


def test_libraries_are_recognised_from_data() -> None:
    assert recognise(url="https://raw.githubusercontent.com/huggingface/transformers/main/examples/pytorch/x/run.py",
                     image=None).name == "transformers"
    assert recognise(url=None, image="axolotlai/axolotl:0.19.0-py3.12-cu130-2.13.0").name == "axolotl"
    assert recognise(url="https://b-61j.pages.dev/datasets/unsloth/jobs/resolve/main/sft-lfm2.5.py",
                     image=None).name == "unsloth"
    assert recognise(url="https://example.com/mine.py", image="python:3.12") is None


@pytest.mark.parametrize(("fields", "said"), [
    ({}, "send script"),
    ({"script": "print(1)", "command": ["echo"]}, "one of the two"),
    ({"command": ["echo", "hi"]}, "send image"),
    ({"image": "python:3.12", "command": ["echo"], "script_args": ["x"]}, "put arguments in command"),
    ({"script": "print(1)", "env": {"HF_TOKEN": "hf_x"}}, "send its name in secrets"),
    ({"script": "print(1)", "env": {"WANDB_API_KEY": "k"}}, "send its name in secrets"),
    ({"script": "print(1)", "env": {"1BAD": "x"}}, "not a variable name"),
    ({"script": "print(1)", "dependencies": ["--index-url=http://evil"]}, "dependencies"),
    ({"folder": "/tmp/p", "script": "../train.py"}, "entry file"),
])
def test_bad_input_is_refused_with_what_to_send(fields: dict, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        ScriptRequest(**fields)


async def test_a_dry_run_renders_the_job_the_header_describes(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    dry = await call_once("run_script", {"script": HEADED, "script_args": ["--lr", "1e-4; rm -rf /"], "dry_run": True})
    assert not dry.is_error, dry.content[0].text
    out = dry.structured_content
    assert (out["flavor"], out["timeout"], out["job_id"]) == ("a10g-small", "1h", None)
    assert out["command"][-5:] == ["uv", "run", "/tmp/script.py", "--lr", "1e-4; rm -rf /"]  # argv, never shell text
    assert out["script"] == HEADED and out["worst_case_cost_usd"] == pytest.approx(1.02)
    assert len(hub.posted_jobs()) == before


# --- inline script and image + command on the Jobs emulator ------------------------------------------------------
async def test_an_inline_script_runs_as_one_job_with_the_header_and_is_followed_to_completed(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK, log_lines=TRAINER_LINES))
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": HEADED, "script_args": ["--max_steps", "10"]})
        report = await finished(client, job["job_id"], 30)
        listed = await call(client, "list_jobs", {})
    spec = only_job(hub, before)
    assert decoded_script(spec) == HEADED
    assert (spec["flavor"], spec["timeoutSeconds"], spec["dockerImage"]) == (
        "a10g-small", 3600, "ghcr.io/astral-sh/uv:python3.12-bookworm")
    assert spec["labels"]["kind"] == "script"
    token_nowhere_but_secrets(spec, job, report)
    assert report["stage"] == "COMPLETED" and report["progress"]["step"] == 10 and report["progress"]["percent"] == 100
    assert report["last_metrics"]["loss"] == 1.25 and report["last_metrics"]["train_loss"] == 1.1
    assert any(j["job_id"] == job["job_id"] and j["method"] == "script" for j in listed["jobs"])


async def test_the_call_wins_over_the_header(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK))
    await call_once("run_script", {"script": HEADED, "flavor": "t4-small", "timeout": "20m"})
    spec = only_job(hub, before)
    assert (spec["flavor"], spec["timeoutSeconds"]) == ("t4-small", 1200)


async def test_an_image_and_command_run_as_sent_and_reach_completed(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK, log_lines=TRAINER_LINES))
    command = ["accelerate", "launch", "--num_processes", "2", "-m", "trl.scripts.sft", "--max_steps", "100",
               "--output_dir", "out", "--push_to_hub"]
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"image": "huggingface/trl:0.20", "command": command,
                                                "flavor": "a10g-largex2", "env": {"WANDB_PROJECT": "p"}})
        report = await finished(client, job["job_id"], 30)
    spec = only_job(hub, before)
    assert spec["dockerImage"] == "huggingface/trl:0.20" and spec["command"] == command
    assert spec["environment"]["WANDB_PROJECT"] == "p" and "HFTM_SCRIPT_B64" not in spec["environment"]
    token_nowhere_but_secrets(spec, job, report)
    assert report["stage"] == "COMPLETED" and job["warnings"] == []  # pinned, launched right, pushes


async def test_a_failing_script_reports_its_error_line(hub: Emulator) -> None:
    hub.plan_next(JobPlan(**QUICK, final_stage="ERROR", log_lines=["Traceback (most recent call last):",
                                                                   "torch.OutOfMemoryError: CUDA out of memory"]))
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": HEADED})
        report = await finished(client, job["job_id"], 30)
    assert report["stage"] == "ERROR" and "OutOfMemoryError" in report["error"]
    assert "out of memory" in report["next_step"]


async def test_a_script_job_can_be_canceled(hub: Emulator) -> None:
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=60))
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": HEADED})
        canceled = await call(client, "cancel_job", {"job_id": job["job_id"]})
        logs = await call(client, "job_logs", {"job_id": job["job_id"]})
    assert canceled["stage"] == "CANCELED" and logs["job_id"] == job["job_id"]


# --- guardrails ---------------------------------------------------------------------------------------------------
async def test_over_the_callers_budget_nothing_is_posted(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    result = await call_once("run_script", {"script": HEADED, "max_cost_usd": 0.5})
    assert result.is_error and "worst case $1.02" in result.content[0].text and "29m" in result.content[0].text
    assert len(hub.posted_jobs()) == before


async def test_over_the_operators_cap_nothing_is_posted(hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TRAIN_MAX_COST_USD", "0.5")
    before = len(hub.posted_jobs())
    result = await call_once("run_script", {"image": "python:3.12", "command": ["python", "-c", "1"],
                                            "flavor": "a100-large", "timeout": "2h", "max_cost_usd": 100})
    assert result.is_error and "HF_TRAIN_MAX_COST_USD" in result.content[0].text
    assert len(hub.posted_jobs()) == before


async def test_an_idempotency_key_launches_once(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    arguments = {"script": HEADED, "idempotency_key": "script-once"}
    async with Client(build_server()) as client:
        first = await call(client, "run_script", arguments)
        second = await call(client, "run_script", arguments)
        other = await refused(client, "submit_training", {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/chat",
                                                           "hub_model_id": "emu-user/x", "idempotency_key": "script-once"})
    assert first["job_id"] == second["job_id"] and "matched job" in second["warnings"][0]
    assert "a script job" in other
    only_job(hub, before)


async def test_over_http_nothing_runs_without_allow_scripts(hub: Emulator, tmp_path: Path) -> None:
    before = len(hub.posted_jobs())
    result = await call_once("run_script", {"script": HEADED}, access=Access.http())
    assert result.is_error and "--allow-scripts" in result.content[0].text
    script = tmp_path / "train.py"
    script.write_text(HEADED)
    allowed = Access.http(scripts=True)
    for arguments in ({"script": str(script)}, {"folder": str(tmp_path), "script": "train.py"},
                      {"script": HEADED, "secrets": ["AWS_SECRET_ACCESS_KEY"]}):
        result = await call_once("run_script", arguments, access=allowed)
        assert result.is_error, arguments
    assert len(hub.posted_jobs()) == before
    hub.plan_next(JobPlan(**QUICK))
    result = await call_once("run_script", {"script": HEADED}, access=allowed)
    assert not result.is_error, result.content[0].text
    only_job(hub, before)


async def test_a_secret_is_sent_by_name_from_the_servers_environment(hub: Emulator,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "wandb-canary-123")
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK))
    job = await call_once("run_script", {"script": HEADED, "secrets": ["WANDB_API_KEY"]})
    spec = only_job(hub, before)
    assert spec["secrets"] == {"HF_TOKEN": WRITE_TOKEN, "WANDB_API_KEY": "wandb-canary-123"}
    assert "wandb-canary-123" not in json.dumps(job.structured_content)
    missing = await call_once("run_script", {"script": HEADED, "secrets": ["NOT_SET_ANYWHERE"]})
    assert missing.is_error and "NOT_SET_ANYWHERE is not set" in missing.content[0].text


async def test_the_guide_s_warnings_are_given(hub: Emulator) -> None:
    dry = await call_once("run_script", {"script": "print('hi')\n", "flavor": "a10g-largex2", "dry_run": True})
    warnings = " ".join(dry.structured_content["warnings"])
    assert "use a launcher" in warnings and "disk is deleted" in warnings
    dry = await call_once("run_script", {"image": "axolotlai/axolotl", "command": ["axolotl", "train", "x.yml"],
                                         "dry_run": True})
    assert "not pinned to a tag" in " ".join(dry.structured_content["warnings"])


# --- a URL, a local file, a folder --------------------------------------------------------------------------------
async def test_a_url_script_is_read_for_its_header_and_fetched_by_the_job(hub: Emulator, served) -> None:
    import hashlib

    files, base = served
    files["/org/repo/refs/heads/main/sft.py"] = HEADED.encode()
    url = base + "/org/repo/refs/heads/main/sft.py"
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK, log_lines=TRAINER_LINES))
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": url, "script_args": ["--push_to_hub"],
                                                "dependencies": ["peft"]})
        report = await finished(client, job["job_id"], 30)
    spec = only_job(hub, before)
    assert spec["command"] == ["uv", "run", "--with", "peft", url, "--push_to_hub"]
    assert "HFTM_SCRIPT_B64" not in spec["environment"] and (spec["flavor"], spec["timeoutSeconds"]) == ("a10g-small", 3600)
    assert job["script_sha256"] == hashlib.sha256(HEADED.encode()).hexdigest()
    assert any("pin a commit" in w for w in job["warnings"])
    token_nowhere_but_secrets(spec, job, report)
    assert report["stage"] == "COMPLETED"


async def test_a_plain_http_url_is_refused_unless_its_loopback_host_is_allowed(hub: Emulator, served,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    files, base = served
    files["/x.py"] = b"print(1)\n"
    monkeypatch.delenv("HF_TRAIN_HTTP_SCRIPT_HOSTS")
    before = len(hub.posted_jobs())
    result = await call_once("run_script", {"script": base + "/x.py"})
    assert result.is_error and "https" in result.content[0].text
    result = await call_once("run_script", {"script": "https://user:pw@example.com/x.py"})
    assert result.is_error and "credentials" in result.content[0].text
    assert len(hub.posted_jobs()) == before


async def test_a_local_py_file_travels_inside_the_job(hub: Emulator, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(HEADED)
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK))
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": str(script)})
        report = await finished(client, job["job_id"], 30)
    spec = only_job(hub, before)
    assert decoded_script(spec) == HEADED and spec["flavor"] == "a10g-small"
    assert report["stage"] == "COMPLETED"
    (tmp_path / "cfg.yaml").write_text("lr: 1\n")
    result = await call_once("run_script", {"script": str(script), "script_args": [str(tmp_path / "cfg.yaml")]})
    assert result.is_error and "folder=" in result.content[0].text


async def test_a_folder_is_synced_to_the_bucket_mounted_and_run_in_a_copy(hub: Emulator, tmp_path: Path) -> None:
    project = tmp_path / "my-project"
    (project / "configs").mkdir(parents=True)
    (project / "train.py").write_text(HEADED)
    (project / "helpers.py").write_text("STEPS = 10\n")
    (project / "configs" / "run.yaml").write_text("push_to_hub: true\n")
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[remote]\n")
    (project / ".env").write_text("WANDB_API_KEY=abc\n")  # credentials go as secrets, never in the copy
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK, log_lines=TRAINER_LINES))
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"folder": str(project), "script": "train.py",
                                                "script_args": ["--config", "configs/run.yaml"]})
        report = await finished(client, job["job_id"], 30)
    spec = only_job(hub, before)
    volume = spec["volumes"][0]
    assert (volume["type"], volume["source"], volume["mountPath"], volume["readOnly"]) == (
        "bucket", "emu-user/jobs-artifacts", "/code", True)
    files = hub.buckets["emu-user/jobs-artifacts"]["files"]
    uploaded = {p.removeprefix(volume["path"] + "/") for p in files if p.startswith(volume["path"] + "/")}
    assert uploaded == {"train.py", "helpers.py", "configs/run.yaml"} and len(files) == 3
    assert volume["path"].startswith("hf-train-mcp/my-project-")  # a place per content (two versions never mix)
    assert hub.buckets["emu-user/jobs-artifacts"]["private"]
    assert spec["command"][:4] == ["/bin/sh", "-c", 'cp -r /code /tmp/project && cd /tmp/project && exec "$@"', "sh"]
    assert spec["command"][4:] == ["uv", "run", "train.py", "--config", "configs/run.yaml"]
    assert spec["flavor"] == "a10g-small"  # the entry's header
    token_nowhere_but_secrets(spec, job, report)
    assert report["stage"] == "COMPLETED"


async def test_an_axolotl_folder_has_its_yaml_checked(hub: Emulator, tmp_path: Path) -> None:
    (tmp_path / "lora.yml").write_text("base_model: microsoft/Phi-3.5-mini-instruct\n")
    dry = await call_once("run_script", {"folder": str(tmp_path), "image": "axolotlai/axolotl:0.19.0-py3.12-cu130-2.13.0",
                                         "command": ["axolotl", "train", "lora.yml"], "flavor": "a10g-largex2",
                                         "dry_run": True})
    warnings = " ".join(dry.structured_content["warnings"])
    assert "lora.yml sets no hub_model_id, hub_strategy" in warnings and "max_steps" in warnings
    assert "use a launcher" not in warnings  # axolotl starts one process per GPU itself


# --- on this machine, and from the CLI ----------------------------------------------------------------------------
LOCAL_SCRIPT = '''# /// script
# dependencies = []
# ///
import os, sys
print("token given:", bool(os.environ.get("HF_TOKEN")), "args:", sys.argv[1:])
for step in (5, 10):
    print(f"{step * 10}%|#####     | {step}/10 [00:01<00:01,  4.00it/s]", flush=True)
print("{'loss': 0.75, 'learning_rate': 1e-05, 'epoch': 1.0}")
'''


@pytest.mark.detached
async def test_a_local_run_of_an_inline_script_completes_with_parsed_progress(offline: None) -> None:
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": LOCAL_SCRIPT, "script_args": ["--x", "a b"],
                                                "backend": "local"})
        report = await finished(client, job["job_id"], 120)
    assert report["stage"] == "COMPLETED", report
    assert report["progress"]["step"] == 10 and report["progress"]["percent"] == 100
    assert report["last_metrics"]["loss"] == 0.75
    assert "token given: False args: ['--x', 'a b']" in report["log_tail"]


def test_the_cli_runs_a_script_with_its_arguments_after_a_double_dash(hub: Emulator, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    from hf_train_mcp.shell.cli import main

    script = tmp_path / "train.py"
    script.write_text(HEADED)
    main(["run", "--script", str(script), "--dry-run", "--json", "--", "--max_steps", "10"])
    out = json.loads(capsys.readouterr().out)
    assert out["command"][-3:] == ["/tmp/script.py", "--max_steps", "10"] and out["flavor"] == "a10g-small"
    main(["run", "--image", "python:3.12", "--dry-run", "--json", "--", "python", "-c", "print(1)"])
    assert json.loads(capsys.readouterr().out)["command"] == ["python", "-c", "print(1)"]
