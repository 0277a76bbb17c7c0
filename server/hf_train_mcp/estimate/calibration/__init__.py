"""The calibration table: published, measured fine-tuning runs (runs.csv + more_runs.csv: sources and evidence;
inputs.csv: the estimator's inputs derived from each row, with the basis of every number) and how the estimator
scores on them. Used by tests/test_calibration.py and fit.py; the server never loads it.
"""

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from hf_train_mcp.backends.catalog import GPU_FACTS, FlavorInfo, GpuFacts
from hf_train_mcp.estimate.constants import Calibration
from hf_train_mcp.estimate.cost import overhead_seconds, train_seconds
from hf_train_mcp.estimate.sizing import ModelSize, _guess_architecture
from hf_train_mcp.estimate.workload import Workload

HERE = Path(__file__).parent
GPU_MODELS = {"T4": ("T4", 16), "A10G": ("A10G", 24), "L4": ("L4", 24), "L40S": ("L40S", 48),
              "A100-40": ("A100", 40), "A100-80": ("A100", 80), "H100": ("H100", 80), "H200": ("H200", 141)}
# The HF trainer skill's estimate (skills/hugging-face-model-trainer/scripts/estimate_cost.py): 0.1 h per
# billion parameters per thousand examples per epoch, times a hardware factor relative to a10g-large.
SKILL_GPU_FACTOR = {"T4": 2.0, "L4": 1.2, "A10G": 1.0, "A100-40": 0.7, "A100-80": 0.7}
SKILL_MULTI_GPU = {2: 0.6, 4: 0.4}


@dataclass(frozen=True)
class Run:
    id: str
    source: str
    measured: bool  # a measured time (exact or rounded), not a source's own forecast
    model: str
    size: ModelSize
    work: Workload
    gpu: str
    gpus: int
    seconds: float
    scope: str
    included: bool  # False: settings the model does not cover (the reason is in `note`)
    note: str

    def flavor(self) -> FlavorInfo:
        model, memory = GPU_MODELS[self.gpu]
        facts = GPU_FACTS[model]
        if memory != facts.memory_gb:
            facts = GpuFacts(**{**facts.__dict__, "memory_gb": float(memory)})
        return FlavorInfo(f"{self.gpu}x{self.gpus}", facts, self.gpus, 0.0)

    def predicted(self, cal: Calibration | None = None) -> float:
        """Seconds of what the measured time covers: the training loop, or the whole job."""
        seconds = train_seconds(self.size, self.work, self.flavor(), cal)[0]
        return seconds + (overhead_seconds(self.size, self.work) if self.scope == "job" else 0.0)

    def skill_formula(self) -> float | None:
        """Seconds by the HF skill's formula (None where it has no factor for the GPU, or no epoch count)."""
        factor = SKILL_GPU_FACTOR.get(self.gpu)
        if factor is None or not self.work.epochs:
            return None
        epochs = self.work.epochs
        if self.work.max_steps:  # the formula counts examples x epochs: convert the steps it ran
            rows = self.work.max_steps * self.work.per_device_batch_size * self.work.gradient_accumulation * self.gpus
            epochs = rows / self.work.num_examples
        factor *= SKILL_MULTI_GPU.get(self.gpus, 1.0 if self.gpus == 1 else 0.4)
        return 0.1 * self.size.billions * self.work.num_examples / 1000 * epochs * factor * 3600


def _number(text: str, default: float | None = None) -> float | None:
    text = (text or "").strip()
    return float(text) if text else default


def _size(row: dict) -> ModelSize:
    params = int(float(row["params_b"]) * 1e9)
    guessed = _guess_architecture(params, "calibration row")
    hidden, layers, vocab = (_number(row[k]) for k in ("hidden", "layers", "vocab"))
    active = _number(row.get("active_params_b", ""))
    return ModelSize(params, int(layers or guessed.layers), int(hidden or guessed.hidden), int(vocab or guessed.vocab),
                     int((hidden or guessed.hidden) * 3.5), "calibration row", active=int(active * 1e9) if active else None,
                     experts=int(_number(row.get("experts", ""), 0)))


def _rows(name: str) -> list[dict]:
    if not (HERE / name).exists():
        return []
    with open(HERE / name, newline="") as f:
        return list(csv.DictReader(f))


def load_runs() -> list[Run]:
    sources = {row["id"]: row for name in ("runs.csv", "more_runs.csv") for row in _rows(name)}
    runs = []
    for row in _rows("inputs.csv"):
        source = sources[row["id"]]
        gpus = int(_number(row["num_gpus"], 1))
        epochs, max_steps = _number(row["epochs"]), _number(row["max_steps"])
        method = row["method"]
        work = Workload(
            method=method, peft=row["peft"], num_examples=int(_number(row["num_examples"], 1000)),
            tokens_per_example=_number(row["tokens_per_example"], 512), epochs=epochs or 1.0,
            max_steps=int(max_steps) if max_steps else None, max_length=int(_number(row["seq_len"], 2048)),
            per_device_batch_size=int(_number(row["per_device_batch"], 1)),
            gradient_accumulation=int(_number(row["grad_accum"], 1)), packing=row["packing"].strip() == "1",
            num_generations=int(_number(row["num_generations"], 8)),
            max_completion_length=int(_number(row["max_completion_length"], 256)),
            completion_length=_number(row["mean_completion_length"]),
            framework="unsloth" if row["framework"] == "unsloth" else "trl",
            generation="vllm" if row["generation_engine"].startswith("vllm") else "hf",
            generation_gpus=int(_number(row["gen_gpus"], 0)),
            sharded=row.get("sharding", "").strip() in ("zero3", "fsdp"),
            gradient_checkpointing=row["gradient_checkpointing"].strip() != "0", liger=row["liger"].strip() == "1",
            nodes=int(_number(row.get("nodes", ""), 1)), eval_tokens=_number(row.get("eval_tokens", "")),
            fp32=row.get("precision", "").strip() == "fp32",
            emulated_bf16=row.get("precision") == "bf16" and row["gpu"] == "T4",  # T4 has no bf16 tensor cores
            fp8_weights=row.get("weights", "").strip() == "fp8",
            generation_per_micro_batch=row.get("grpo_generation", "").strip() == "micro",
            save_steps=int(_number(row.get("save_steps", ""), 0)),
            reference_passes=1.0 if float(row.get("grpo_beta", "") or 0) > 0 else None,  # GRPO with beta > 0
            trainable_share=_number(row.get("trainable_share", "")), eager_attention=row["attention"] == "eager",
        )
        kind = source["measured_or_estimated"].lower()
        runs.append(Run(
            id=row["id"], source=source["source_group"], measured=kind.startswith("measured"), model=source["model"],
            size=_size(row), work=work, gpu=row["gpu"], gpus=gpus, seconds=float(row["wall_time_s"]),
            scope=row["wall_scope"], included=not row.get("excluded", "").strip(),
            note=row.get("excluded", "").strip() or row["input_notes"],
        ))
    return runs


@dataclass(frozen=True)
class Score:
    run: Run
    predicted: float
    error: float  # predicted / measured - 1
    skill: float | None


def score(runs: list[Run], cal: Calibration | None = None) -> list[Score]:
    out = []
    for run in runs:
        predicted = run.predicted(cal)
        skill = run.skill_formula()
        out.append(Score(run, predicted, predicted / run.seconds - 1, None if skill is None else skill / run.seconds - 1))
    return out


def summary(scores: list[Score]) -> dict[str, float]:
    errors = [abs(s.error) for s in scores if s.run.included and s.run.measured]
    skill = [abs(s.skill) for s in scores if s.skill is not None and s.run.included and s.run.measured]
    return {"rows": len(errors), "median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
            "skill_median_abs_error": statistics.median(skill) if skill else math.nan}


def table(scores: list[Score]) -> str:
    lines = [f"{'id':>4} {'model':28} {'method':6} {'peft':5} {'gpu':>10} {'measured':>9} {'ours':>9} {'err':>6}"
             f" {'skill':>7}  note"]
    for s in scores:
        r = s.run
        skill = f"{s.skill:+.0%}" if s.skill is not None else "-"
        flag = "" if r.included else "excluded: "
        lines.append(f"{r.id:>4} {r.model[:28]:28} {r.work.method:6} {r.work.peft:5} {r.gpu + 'x' + str(r.gpus):>10}"
                     f" {r.seconds / 3600:8.2f}h {s.predicted / 3600:8.2f}h {s.error:+6.0%} {skill:>7}  "
                     f"{flag}{r.note[:60] if not r.included else ''}")
    return "\n".join(lines)
