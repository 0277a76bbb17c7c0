"""The words the server gives an agent besides the tools: its instructions (sent with `initialize`) and the
finetune prompt. Both name every method from the registry."""

import json


def instructions() -> str:
    """The server's instructions: the typical flow, and every method by its title."""
    from hf_train_mcp import methods

    return f"""\
Fine-tune models with TRL ({", ".join(spec.title for spec in methods.REGISTRY.values())}) on Hugging Face Jobs, or on
this machine when there is no HF account (backend='local'). Typical flow: validate_dataset -> estimate_cost ->
submit_training (dry_run=True first to review the script) -> job_status now and then, or subscribe to hf-train://jobs/{{job_id}}
(it never waits) -> evaluate_model(job_id) -> export_model(job_id, format='merged'|'gguf'). Jobs keep running
after this conversation; the model is pushed to hub_model_id with checkpoints along the way. The finetune
prompt walks through the whole loop."""


def _method_hints() -> str:
    """Each method by the columns of the first format it reads, from the registry."""
    from hf_train_mcp import methods
    from hf_train_mcp.data.formats import FORMATS

    return "; ".join(f"{'+'.join(FORMATS[spec.formats[0]].columns)}: {name} ({spec.summary})"
                     for name, spec in methods.REGISTRY.items())


def finetune_prompt(model: str, dataset: str, goal: str = "") -> str:
    aim = f" The goal: {goal}." if goal else ""
    return f"""Fine-tune {model} on {dataset} with the hf-train tools.{aim}

1. validate_dataset(dataset={json.dumps(dataset)}, method=...) — pick the method from the data ({_method_hints()})
   and apply its suggested_column_mapping.
2. estimate_cost(model={json.dumps(model)}, dataset=...) — show me the cheapest flavor that fits, hours, dollars and
   the recommended timeout; for a run over ~$20 offer estimate_cost(measure=True) first.
3. submit_training(..., dry_run=True) — show the plan (flavor, timeout, worst case), then submit for real with a
   hub_model_id under my account and an idempotency_key, and give me the job, Trackio and model URLs.
4. Follow it: subscribe to hf-train://jobs/<job_id> (or call job_status every few minutes, never in a loop) and
   tell me when it ends; on ERROR read `error` and `next_step` and propose the fix.
5. When it completes: evaluate_model(model=<job_id>) — held-out loss/perplexity (or preference accuracy, mean
   reward) and base vs fine-tuned samples; its job_status last_metrics hold the results, which also land in the
   model card and the Trackio project. Report them next to the training loss.
6. export_model(model=<job_id>, format="merged") for vLLM/transformers, or format="gguf" (q4_k_m) for
   llama.cpp/Ollama, if I want to run it elsewhere. Report every step with its job and model URLs.
If I ask for the best settings, use submit_sweep over a small grid (learning_rate, lora_r) under my budget, then
compare_runs and evaluate/export its best_job_id."""
