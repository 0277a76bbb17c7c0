"""What a job's model card says, decided by the server and written by the job (templates/_base.py.j2: card_text).

The card config travels in CONFIG like every other value (a literal), so the job writes the README.md with
huggingface_hub's ModelCardData: base_model, datasets, library_name, tags, pipeline_tag and, inherited from the
base model's own card at run time, license.
"""

from typing import Any

from hf_train_mcp import engines, methods
from hf_train_mcp.access import is_local


def hub_ref(ref: str | None) -> str | None:
    """A Hub id for the card's metadata (a local path is no reference a reader can follow)."""
    return None if ref is None or is_local(ref) else ref


def card_config(*, title: str, summary: str, base_model: str | None, datasets: list[str],
                library_name: str | None, tags: list[str | None], settings: dict[str, Any],
                estimated_hours: float | None, estimated_cost_usd: float | None, usd_per_hour: float | None,
                trackio_url: str | None, pipeline_tag: str = "text-generation", license_: str | None = None,
                base_model_relation: str | None = None) -> dict[str, Any]:
    """base_model_relation: how the Hub links this repo to base_model (adapter, merge, quantized, finetune)."""
    return {
        "title": title, "summary": summary, "base_model": hub_ref(base_model),
        "datasets": [d for d in (hub_ref(d) for d in datasets) if d], "library_name": library_name,
        "tags": list(dict.fromkeys(["hf-train-mcp", *(t for t in tags if t)])), "pipeline_tag": pipeline_tag, "license": license_,
        "settings": {k: v for k, v in settings.items() if v is not None}, "estimated_hours": estimated_hours,
        "estimated_cost_usd": estimated_cost_usd, "usd_per_hour": usd_per_hour, "trackio_url": trackio_url,
        "job_url": None, "base_model_relation": base_model_relation if hub_ref(base_model) else None,
    }


def training_card(config: dict[str, Any], *, flavor: str, usd_per_hour: float | None,
                  estimated_hours: float | None, estimated_cost_usd: float | None, trackio_url: str | None,
                  effective_batch_size: int) -> dict[str, Any]:
    method, peft = config["method"], config["peft"]
    spec = methods.get(method)
    engine = engines.get(config["engine"])
    library = spec.library if engine.name == engines.DEFAULT else f"{engine.title} + {spec.library}"
    name = config["hub_model_id"] or config["run_name"]
    adapter = peft != "full"
    settings = {
        "method": spec.title, "engine": None if engine.name == engines.DEFAULT else engine.title, "peft": peft, "base model": config["model"], "dataset": config["dataset"],
        "learning rate": config["learning_rate"],
        "epochs": None if config["max_steps"] else config["epochs"], "max steps": config["max_steps"],
        "max length": config["max_length"], "per-device batch": config["per_device_batch_size"],
        "gradient accumulation": config["gradient_accumulation"], "effective batch": effective_batch_size,
        "LoRA r / alpha": f"{config['lora']['r']} / {config['lora']['alpha']}" if adapter else None,
        **{f"{spec.title} {key}": value for key, value in spec.card_settings(config).items()},
        # a vision-language model: what trained of it (the template's frozen_vision_tower) and the image budget
        "trained": "language model and projector; vision encoder frozen" if config.get("vision") and not adapter
        else None,
        "image tokens (max)": config.get("max_image_tokens"),
        "hardware": flavor, "seed": config["seed"],
    }
    summary = (f"A {spec.summary} of `{config['model']}` on `{config['dataset']}` with {library}"
               + (f" ({'QLoRA' if peft == 'qlora' else 'LoRA'} adapter)" if adapter else " (full fine-tune)")
               + ", trained and submitted by hf-train-mcp.")
    loads_with = "peft" if adapter else "transformers"
    if spec.model_library != "transformers":  # a SentenceTransformer folder loads as one, adapter or not
        loads_with = spec.model_library
    return card_config(
        title=name, summary=summary, base_model=config["model"], datasets=[config["dataset"]],
        library_name=loads_with,
        tags=[*([engine.name] if engine.name != engines.DEFAULT else []), spec.library.split()[0].lower(), method, *(["lora"] if adapter else [])],
        settings=settings, estimated_hours=estimated_hours, estimated_cost_usd=estimated_cost_usd,
        usd_per_hour=usd_per_hour, trackio_url=trackio_url,
        pipeline_tag=spec.pipeline_tag, base_model_relation="adapter" if adapter else "finetune",
    )
