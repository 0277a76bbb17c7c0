"""Each method x PEFT mode for a few steps with the script submit_training renders, next to TRL's stock
`trl/scripts/sft.py` on the same model and data: samples/s, tokens/s (SFT), peak memory and loss movement.

On a GPU machine: python benchmarks/gpu.py [--model PATH_OR_ID] [--steps 20]
Anywhere (CPU, tiny in-process model, no QLoRA): python benchmarks/gpu.py --cpu
Unsloth vs TRL on the same QLoRA and LoRA SFT run (CUDA and `pip install unsloth` needed; skipped otherwise):
    python benchmarks/gpu.py --methods sft --pefts qlora,lora --engines trl,unsloth
The families' GPU branches for real (the CPU suite's replays, where CUDA makes them take the GPU's own paths:
bitsandbytes' CUDA 4-bit, CUDA autocast and its grad scaler, NCCL for the two-rank checks where torchrun finds it):
    python benchmarks/gpu.py --families
Across nodes (the ready check of submit_training(nodes=N)), on each node of one Jobs network group:
    accelerate launch --num_machines N --machine_rank R ... benchmarks/gpu.py --nccl

Peak memory is measured around the script (torch.cuda.max_memory_allocated on GPU, max RSS on CPU) by a
wrapper that runs it unchanged, so the figures are what a job would see.
"""

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from hf_train_mcp import methods  # noqa: E402
from hf_train_mcp.estimate.hardware import fallback_catalog  # noqa: E402
from hf_train_mcp.estimate.sizing import model_size  # noqa: E402
from hf_train_mcp.planning.training import DataFacts, plan_run  # noqa: E402
from hf_train_mcp.contract.requests import TrainingRequest  # noqa: E402
from hf_train_mcp_demo.tiny import build_tiny_model, example_rows, write_jsonl  # noqa: E402

# Runs a script or module unchanged and prints its peak memory on the way out.
MEASURE = """
import resource, runpy, sys
target, args = sys.argv[1], sys.argv[2:]
sys.argv = [target, *args]
try:
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
finally:
    import torch
    if torch.cuda.is_available():
        print("PEAK_GB", torch.cuda.max_memory_allocated() / 1e9, flush=True)
    else:
        print("PEAK_GB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, flush=True)
"""
FAST = {"num_generations": 4, "max_completion_length": 32}  # short generations: the benchmark times the steps


def options(method: str, model: str) -> dict:
    """The fast settings a method takes, and a teacher (the model itself) where it needs one."""
    chosen = {k: v for k, v in FAST.items() if method in methods.takers(k)}
    return {**chosen, **({"teacher_model": model} if method in methods.takers("teacher_model") else {})}


def run(folder: Path, target: str, args: list[str], cpu: bool) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRACKIO_DIR": str(folder / "trackio"), "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    if cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run([sys.executable, "-c", MEASURE, target, *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=3600)
    out = proc.stdout + proc.stderr
    result = {"ok": proc.returncode == 0, "error": None if proc.returncode == 0 else out.strip().splitlines()[-1:]}
    peak = re.findall(r"PEAK_GB ([\d.]+)", out)
    result["peak_gb"] = float(peak[-1]) if peak else None
    logs = [json.loads(line[9:]) for line in out.splitlines() if line.startswith("HFTM_LOG ")]
    if not logs:  # the stock script prints the trainer's log dicts instead of our status lines
        logs = [{k: float(v) for k, v in re.findall(r"'(\w+)': '?([-\d.e]+)'?", line)}
                for line in out.splitlines() if line.startswith("{'")]
    losses = [entry["loss"] for entry in logs if "loss" in entry]
    final = next((entry for entry in reversed(logs) if "train_runtime" in entry), {})
    tokens = max((entry.get("num_tokens", 0) for entry in logs), default=0)
    result.update(
        first_loss=losses[0] if losses else None, last_loss=losses[-1] if losses else None,
        samples_per_s=final.get("train_samples_per_second"),
        tokens_per_s=tokens / final["train_runtime"] if tokens and final.get("train_runtime") else None,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run on CPU with a tiny in-process model")
    parser.add_argument("--model", help="model path or Hub id (default: the tiny in-process model)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--methods", default=",".join(methods.NAMES))
    parser.add_argument("--pefts", default="lora,qlora,full")
    parser.add_argument("--engines", default="trl", help="trl,unsloth: each run under each engine that covers it "
                        "(Unsloth: SFT/GRPO, LoRA/QLoRA, CUDA only), and Unsloth's ratio to TRL on the same run")
    parser.add_argument("--nccl", action="store_true", help="instead: the multi-node ready check (benchmarks/nccl.py, "
                        "NCCL all-reduce bandwidth), on each node of a network group under accelerate launch/torchrun")
    parser.add_argument("--families", action="store_true", help="instead: the replay tests of every family "
                        "(tests/test_gpu_replay_*.py), which take the GPU's own branches where CUDA is present")
    args = parser.parse_args()
    if args.families:
        sys.exit(families())
    if args.nccl:  # what only a GPU cluster can prove: the nodes of one group reach each other at speed
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import nccl

        nccl.main()
        return
    workdir = Path(tempfile.mkdtemp(prefix="hftm-gpu-bench-"))
    model = args.model or str(build_tiny_model(workdir / "tiny-model"))
    size = model_size(model, offline=True)
    gpu = not args.cpu and _has_cuda()
    chosen = _engines(args.engines.split(","), gpu)
    rows = scripted_rows(args, workdir, model, size, gpu, chosen)
    rows.append(("stock trl sft/lora", stock_sft(args, workdir, model, gpu)))

    print(f"device: {'GPU' if gpu else 'CPU'}; model: {model} ({size.billions:.3f} B); {args.steps} steps, "
          f"batch {args.batch}")
    print(f"{'run':30s} {'ok':3s} {'samples/s':>10s} {'tokens/s':>10s} {'peak GB':>8s} {'loss first->last':>18s}")
    for name, r in rows:
        loss = (f"{r['first_loss']:.3f}->{r['last_loss']:.3f}" if r["first_loss"] is not None else "-")
        print(f"{name:30s} {'yes' if r['ok'] else 'NO':3s} {_num(r['samples_per_s']):>10s} "
              f"{_num(r['tokens_per_s']):>10s} {_num(r['peak_gb']):>8s} {loss:>18s}"
              + (f"  {r['error']}" if r["error"] else ""))
    compare_engines(dict(rows))


def _engines(names: list[str], gpu: bool) -> list[str]:
    """The engines to run: Unsloth only where it can run (it needs CUDA, and the package installed)."""
    if "unsloth" in names and not gpu:
        print("engine unsloth skipped: Unsloth needs a CUDA GPU (without one it falls back to plain TRL)")
    elif "unsloth" in names and importlib.util.find_spec("unsloth") is None:
        print("engine unsloth skipped: the unsloth package is not installed (pip install unsloth)")
    else:
        return names
    return [name for name in names if name != "unsloth"]


def scripted_rows(args: argparse.Namespace, workdir: Path, model: str, size, gpu: bool,
                  chosen: list[str]) -> list[tuple[str, dict]]:
    """Each method x PEFT x engine with the script submit_training renders for this machine."""
    rows = []
    for method in args.methods.split(","):
        data = write_jsonl(workdir / method / "train.jsonl", example_rows(method, max(64, args.steps * args.batch)))
        for peft in args.pefts.split(","):
            if peft == "qlora" and not gpu:
                continue
            for engine in chosen:
                try:
                    request = TrainingRequest(model=model, dataset=str(data), method=method, peft=peft,
                                              backend="local", max_steps=args.steps, per_device_batch_size=args.batch,
                                              gradient_accumulation=1, max_length=256, engine=engine,
                                              **options(method, model))
                except ValueError:  # a peft the method does not offer (embedding: no QLoRA), or the engine
                    continue
                name = f"{method}/{peft}" + ("" if engine == "trl" else f" [{engine}]")
                folder = workdir / f"{method}-{peft}-{engine}"
                folder.mkdir()
                plan = plan_run(request, backend="local", size=size, catalog=fallback_catalog(), namespace=None,
                                data=DataFacts(), local_cuda=gpu)
                (folder / "train.py").write_text(plan.render().text)
                rows.append((name, run(folder, "train.py", [], args.cpu)))
    return rows


def stock_sft(args: argparse.Namespace, workdir: Path, model: str, gpu: bool) -> dict:
    """TRL's own trl/scripts/sft.py with LoRA on the SFT data: the yardstick for our SFT/LoRA row."""
    stock = workdir / "stock-sft"
    stock.mkdir()
    stock_args = ["--model_name_or_path", model, "--dataset_name", str(workdir / "sft"), "--max_steps",
                  str(args.steps), "--per_device_train_batch_size", str(args.batch), "--learning_rate", "2e-4",
                  "--use_peft", "--lora_r", "16", "--lora_alpha", "32", "--max_length", "256", "--logging_steps",
                  "1", "--report_to", "none", "--output_dir", str(stock / "out"),
                  *(["--bf16"] if gpu else ["--use_cpu"])]
    return run(stock, "trl.scripts.sft", stock_args, args.cpu)


def compare_engines(rows: dict[str, dict]) -> None:
    """Unsloth against TRL on the same run (same model, data, steps, batch, LoRA settings): its tokens/s and
    peak GPU memory as ratios, what the estimate's unsloth_speedup and memory shares (engines.py) claim."""
    pairs = [(name, rows[f"{name} [unsloth]"]) for name in rows if f"{name} [unsloth]" in rows]
    if not pairs:
        return
    print(f"\n{'unsloth vs trl':30s} {'tokens/s x':>10s} {'peak GB x':>10s}")
    for name, ours in pairs:
        base = rows[name]
        speed = ours["tokens_per_s"] / base["tokens_per_s"] if ours["tokens_per_s"] and base["tokens_per_s"] else None
        memory = ours["peak_gb"] / base["peak_gb"] if ours["peak_gb"] and base["peak_gb"] else None
        print(f"{name:30s} {_num(speed):>10s} {_num(memory):>10s}")


REPLAYS = ("test_gpu_replay_text.py", "test_gpu_replay_classifiers.py", "test_gpu_replay_vlm.py",
           "test_gpu_replay_nodes.py", "test_gpu_paths.py", "test_zoo_replay.py")


def families() -> int:
    """The families' replays under pytest, on this machine's GPU when it has one; its exit status."""
    root = Path(__file__).resolve().parents[1]
    print(f"families on {'CUDA' if _has_cuda() else 'CPU (replayed branches only)'}", flush=True)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=15",
                           *(str(root / "tests" / name) for name in REPLAYS)], cwd=root).returncode


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
