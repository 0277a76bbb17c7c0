"""export_model's plan: a merged standalone model or a GGUF file for llama.cpp, where it is pushed, and the
script's CONFIG, rendered from templates/export.py.j2."""

from hf_train_mcp import backends, methods
from hf_train_mcp.access import is_local
from hf_train_mcp.planning.cards import card_config, hub_ref
from hf_train_mcp.errors import TrainError
from hf_train_mcp.estimate.hardware import Catalog
from hf_train_mcp.estimate.jobs import ExportWork, JobEstimate, export_on, export_options
from hf_train_mcp.estimate.sizing import DTYPE_BYTES, ModelSize
from hf_train_mcp.hub import hub_endpoint
from hf_train_mcp.contract.requests import ExportRequest
from hf_train_mcp.planning.followups import common_config, followup_plan, followup_timeout, is_vision, place
from hf_train_mcp.planning.gguf_architectures import GGUF_ARCHITECTURES
from hf_train_mcp.planning.subjects import Subject
from hf_train_mcp.planning.training import PEFT_REQUIREMENT, RunPlan

# config.json model types of the encoders llama.cpp's convert_hf_to_gguf.py converts as embedding models (its
# conversion/bert.py registrations, llama-cpp-python 0.3.36's tree): the pooling comes from modules.json
GGUF_ENCODERS = frozenset({"bert", "camembert", "distilbert", "roberta", "xlm-roberta", "nomic_bert", "neobert",
                           "eurobert", "jina_bert", "modernbert"})
GGUF_DEPENDENCIES = ["gguf>=0.17", "sentencepiece>=0.2", "protobuf>=4", "numpy>=1.26"]
CMAKE = "cmake>=3.28"  # llama-quantize is built in the job: the image has a compiler, not cmake
# llama.cpp's sources at a pinned release: the tree llama-cpp-python's sdist vendors (PyPI never replaces a
# published file; the script checks the sha256 too), not a clone of a moving HEAD
LLAMA_CPP_REPO = {
    "version": "llama-cpp-python 0.3.36",
    "url": "https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/"
           "llama_cpp_python-0.3.36.tar.gz",
    "sha256": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    "root": "llama_cpp_python-0.3.36/vendor/llama.cpp",
}


def _estimate_note(estimate: JobEstimate | None) -> dict:
    return {"estimated_hours": round(estimate.hours, 2) if estimate else None,
            "estimated_cost_usd": estimate.cost_usd if estimate else None}


def export_target(req: ExportRequest, subject: Subject, backend: str) -> str | None:
    """The repo an export pushes to: hub_model_id, else beside the source (`<repo>-merged`, `<repo>-GGUF`)."""
    if not backends.traits(backend).pushes_to_hub:
        return None
    source = subject.job.hub_model_id if subject.job else (None if is_local(subject.ref) else subject.ref)
    if req.hub_model_id:
        if req.hub_model_id.lower() in {(source or "").lower(), subject.ref.lower()}:  # on top of what it reads
            # (Hub ids are case-insensitive)
            raise TrainError(f"hub_model_id {req.hub_model_id!r} is the repo being exported: the export would be "
                             f"mixed into it; send another, e.g. {_beside(req.hub_model_id, req.format)!r}. Nothing "
                             "was launched.")
        return req.hub_model_id
    if not source:
        raise TrainError("hub_model_id is required: where should the exported model be pushed ('owner/name')?")
    return _beside(source, req.format)


def _beside(repo: str, format: str) -> str:
    return f"{repo}-GGUF" if format == "gguf" else f"{repo}-merged"


def export_dtype(subject: Subject, size: ModelSize) -> str:
    """What the export loads and writes, as export_on sizes it: the base model's dtype (config.json; bf16 for most).
    A full fine-tune of ours is sized by its base (Subject.sized_by) but saved fp32 masters: never "auto" for it."""
    if size.dtype in DTYPE_BYTES:
        return size.dtype
    return "bfloat16" if subject.kind == "full" and subject.training is not None else "auto"


def _exportable(req: ExportRequest, subject: Subject, size: ModelSize) -> bool:
    """Whether the model is a classifier; refused (export_refusal) with what to send instead."""
    refusal = export_refusal(size, subject.method, req.format, subject.sized_by)
    if refusal:
        raise TrainError(refusal)
    return bool(subject.method and methods.get(subject.method).classifier)


def export_refusal(size: ModelSize, method: str | None, format: str, model: str) -> str | None:
    """Why this export cannot write a model of this size and family trained with `method` (None: a language
    model's): a checkpoint stored in bitsandbytes, GGUF of what llama.cpp cannot run or this server cannot convert,
    a model without a vocabulary; None when it can."""
    refusal = stored_refusal(size, format, model) or (gguf_refusal(size, method) if format == "gguf" else None)
    classifier = bool(method and methods.get(method).classifier)
    if not refusal and not classifier and size.model_type and not size.config_vocab:
        refusal = (f"{model} is a {size.model_type!r} model without a vocabulary (no vocab_size in its config.json): "
                   "export_model writes causal language models (merged or GGUF). Nothing was launched.")
    return refusal


def gguf_refusal(size: ModelSize, method: str | None) -> str | None:
    """Why no GGUF is made of a model of this size and family trained with `method` (None: a language model's),
    with what to send instead; None when llama.cpp's converter takes it."""
    spec = methods.get(method) if method else None
    if is_vision(size):
        return ("GGUF export of a vision-language model needs its vision projector (mmproj) converted too, which "
                "this server does not do yet: export format='merged' and convert with llama.cpp's own tools. Nothing "
                "was launched.")
    if spec and spec.model_library == "sentence-transformers":
        return None if size.model_type in GGUF_ENCODERS else (
            f"llama.cpp's converter takes embedding models built on BERT-style encoders "
            f"({', '.join(sorted(GGUF_ENCODERS))}); this one is a {size.model_type or 'unknown'!r} model. "
            "format='merged' makes an adapter a standalone SentenceTransformer. Nothing was launched.")
    if spec and spec.classifier:
        return (f"{'an' if spec.summary[0] in 'aeiou' else 'a'} {spec.summary} is a classifier, which llama.cpp does "
                "not run: GGUF does not apply. format='merged' makes an adapter a standalone model. Nothing was "
                "launched.")
    architecture = size.family.architecture if size.family else None
    if architecture and architecture not in GGUF_ARCHITECTURES:
        return (f"llama.cpp's converter ({LLAMA_CPP_REPO['version']}) has no converter for {architecture} (it would "
                f"stop with \"Architecture {architecture!r} not supported\"): export format='merged' (safetensors, "
                "which transformers, vLLM and TGI load), or pick a model llama.cpp converts (Llama, Qwen, Gemma, "
                "Mistral, Phi, ...). Nothing was launched.")
    return None


def stored_refusal(size: ModelSize, format: str, model: str) -> str | None:
    """A checkpoint stored in bitsandbytes 4/8-bit (config.json quantization_config) is no export's input: loading
    it needs bitsandbytes, which the export job does not install, and would write the same 4-bit weights again;
    and llama.cpp's converter refuses them (conversion/base.py: "Quant method is not yet supported: ...")."""
    stored = size.quantization
    if stored is None or not stored.bitsandbytes:
        return None
    what = ("a GGUF" if format == "gguf" else "a merged model")
    return (f"{model} is stored quantized ({stored.describe()}, config.json quantization_config), which {what} "
            "cannot be made from: the export would load bitsandbytes weights the job cannot read, and llama.cpp's "
            "converter refuses them. Export from the unquantized original it was made from (its model card's "
            "base_model), or train on that original and export the result. Nothing was launched.")


def plan_export(req: ExportRequest, subject: Subject, *, backend: str, size: ModelSize, catalog: Catalog,
                namespace: str | None, warnings: list[str]) -> RunPlan:
    classifier = _exportable(req, subject, size)
    spec = methods.get(subject.method) if subject.method else None
    library = spec.model_library if spec else "transformers"
    # an embedding's quality lives in its vector: 8 bits by default, where a chat model takes 4
    default = "q8_0" if library == "sentence-transformers" else "q4_k_m"
    quantization = (req.quantization or default) if req.format == "gguf" else None
    if req.format == "merged" and subject.kind == "full":
        warnings.append("this model is a full fine-tune, already standalone: the export re-saves it as safetensors "
                        "with its tokenizer")
    work = ExportWork(format=req.format, quantization=quantization, merge=subject.kind == "adapter")
    flavor, estimate, price = place(req, "export", export_options(size, work, catalog),
                                    lambda info: export_on(size, work, info), catalog=catalog, backend=backend,
                                    warnings=warnings)
    if size.params > 30e9 and backends.traits(backend).pushes_to_hub:
        warnings.append(f"a {size.billions:.0f}B export holds the whole model in memory and writes "
                        f"~{size.params * 6 / 1e9:.0f} GB to disk")
    timeout = followup_timeout(req, estimate, backend=backend, flavor=flavor, price=price, warnings=warnings)
    target = export_target(req, subject, backend)
    stem = (target or subject.ref).rstrip("/").split("/")[-1].removesuffix("-GGUF")
    source = subject.job.hub_model_id if subject.job and subject.job.hub_model_id else hub_ref(subject.ref)
    config = {
        **common_config(subject, backend, size),
        "format": req.format, "quantization": quantization, "file_stem": stem, "classifier": classifier,
        "model_library": library,
        "dtype": export_dtype(subject, size), "total_steps": 3 if quantization not in (None, "f16", "q8_0") else 2,
        "llama_cpp_repo": LLAMA_CPP_REPO, "card_source": subject.card_folder or source,
        "push_to_hub": target is not None, "hub_model_id": target, "private": req.private,
    }
    config["card"] = _card(req, subject, spec, title=target or stem, source=source, quantization=quantization,
                           library=library, flavor=flavor, estimate=estimate, price=price)
    dependencies = ["transformers>=5.0,<6", PEFT_REQUIREMENT, "accelerate>=1.4,<2", "torch>=2.6,<2.11",
                    "safetensors>=0.4", *(spec.dependencies if spec else ())]
    if req.format == "gguf":
        dependencies += GGUF_DEPENDENCIES + ([CMAKE] if config["total_steps"] == 3 else [])
    return followup_plan(req, backend=backend, flavor=flavor, estimate=estimate, price=price, timeout=timeout,
                         config=config, dependencies=dependencies, namespace=namespace, template="export",
                         warnings=warnings)


def _card(req: ExportRequest, subject: Subject, spec: methods.MethodSpec | None, *, title: str, source: str | None,
          quantization: str | None, library: str, flavor: str, estimate: JobEstimate | None,
          price: float) -> dict:
    """The exported model's card: what it is, made from what, on which hardware."""
    training = subject.training
    base = subject.base_model if subject.kind == "adapter" else subject.ref
    what = (f"GGUF ({quantization}) of `{source or subject.ref}` for llama.cpp, Ollama and LM Studio"
            if req.format == "gguf" else
            f"`{source or subject.ref}` merged into its base `{base}`: a standalone model, no adapter needed")
    endpoint = hub_endpoint()
    return card_config(
        title=title, summary=what + ", exported by hf-train-mcp.",
        base_model=(source or base) if req.format == "gguf" else base,
        datasets=[training.dataset] if training else [], library_name=None if req.format == "gguf" else library,
        tags=["gguf", "llama.cpp", quantization] if req.format == "gguf" else
        ["merged", "trl" if library == "transformers" else library],
        settings={"format": req.format, "quantization": quantization, "source": source or subject.ref,
                  "base model": base, "hardware": flavor},
        **_estimate_note(estimate), usd_per_hour=price,
        trackio_url=f"{endpoint}/spaces/{training.trackio_space_id}" if training and training.trackio_space_id
        else None,
        base_model_relation="quantized" if req.format == "gguf" else "merge",
        pipeline_tag=spec.pipeline_tag if spec else "text-generation")
