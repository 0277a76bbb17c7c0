"""What a follow-up job (an evaluation, an export) works on: the `job_id` of a finished training job (its base
model, adapter, data and held-out split come from the ledger), a local folder, or a Hub repo."""

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from hf_train_mcp import backends, methods
from hf_train_mcp.access import Access, is_local
from hf_train_mcp.data.validate import outside_images
from hf_train_mcp.errors import AccessError, NotFoundError, TrainError
from hf_train_mcp.jobs.ledger import JobRecord
from hf_train_mcp.models.family import Family
from hf_train_mcp.models.refusals import followup_method, followup_quantization_refusal, followup_refusal
from hf_train_mcp.models.files import Quantization
from hf_train_mcp.contract.requests import TrainingRequest


@dataclass(frozen=True)
class Subject:
    """The model a follow-up job reads."""

    ref: str  # the adapter or model folder, or Hub repo, the job loads
    kind: str  # "adapter" (LoRA/QLoRA on base_model) or "full"
    base_model: str | None
    method: str | None  # how it was trained, when known
    job: JobRecord | None = None
    training: TrainingRequest | None = None
    card_folder: str | None = None  # a local training output whose README.md an evaluation updates

    @property
    def sized_by(self) -> str:
        """The model whose size decides memory and time (an adapter is small; its base is not). A full fine-tune of
        a training job is sized by its base too: the same parameters, in the dtype the export writes (the base's),
        where the fine-tune's own config.json says fp32 (its master weights)."""
        if self.base_model and (self.kind == "adapter" or self.training is not None):
            return self.base_model
        return self.ref


def _from_folder(folder: Path, method: str | None, access: Access) -> tuple[str, str | None, str | None]:
    """(kind, base model, method) of a saved adapter or model."""
    adapter = folder / "adapter_config.json"
    if adapter.exists():
        config = json.loads(adapter.read_text())
        task = config.get("task_type")
        labelled = (folder / "labels.json").exists()
        return "adapter", config.get("base_model_name_or_path"), method or methods.for_peft_task(task, labelled=labelled)
    if (folder / "config.json").exists():
        return "full", None, method
    raise TrainError(f"{access.shown(folder)} holds neither an adapter (adapter_config.json) nor a model "
                     "(config.json)")


def check_job_inputs(access: Access, record: JobRecord, training: TrainingRequest) -> None:
    """A follow-up of a job reads what that job read: a caller who could not have named those paths itself may
    not reach them through the job (its output folder is this server's own, and open to it)."""
    source = f"job {record.job_id}"
    for ref, what in ((training.model, "model"), (training.dataset, "dataset"),
                      (getattr(training, "teacher_model", None), "teacher model")):
        access.check_derived(ref, what, source)
    if outside_images(training.dataset, training.column_mapping, access) is not None:  # images its rows name
        raise AccessError(f"{source} reads local files outside the folders callers over {access.over} may use (its "
                          "rows' images, or links in its data folder), so this server will not run it for you; ask "
                          "the operator, or work on a model pushed to the Hub")


def subject_from_job(record: JobRecord, stage: str, backend_name: str, access: Access) -> Subject:
    if record.kind != "train":
        raise TrainError(f"job {record.job_id} is a {record.kind} job, not a training job: pass the job_id of a "
                         "finished submit_training job (list_jobs)")
    if stage != "COMPLETED":
        more = (" it did not finish; its pushed checkpoints can be resumed with submit_training(resume_from=...)"
                if stage in ("ERROR", "CANCELED", "DELETED") else " wait until job_status says COMPLETED")
        raise TrainError(f"job {record.job_id} is {stage}:{more}. Nothing was launched.")
    training = TrainingRequest.model_validate_json(record.request_json)
    check_job_inputs(access, record, training)
    kind = "full" if training.peft == "full" else "adapter"
    if not backends.traits(record.backend).pushes_to_hub:
        if not backends.traits(backend_name).reads_local_paths:
            raise TrainError(f"job {record.job_id} ran on {backends.traits(record.backend).place}, so its model is "
                             "not on the Hub: use "
                             f"backend={record.backend!r}, or push its output folder to the Hub and pass that repo id")
        folder = Path(record.output_dir or "")
        if not folder.is_dir():
            raise NotFoundError(f"the output of job {record.job_id} ({access.shown(folder)}) is gone from this machine")
        return Subject(ref=str(folder), kind=kind, base_model=training.model, method=training.method, job=record,
                       training=training, card_folder=str(folder))
    if not record.hub_model_id:
        raise TrainError(f"job {record.job_id} pushed no model repo; pass a Hub repo id instead")
    return Subject(ref=record.hub_model_id, kind=kind, base_model=training.model, method=training.method,
                   job=record, training=training)


def subject_from_ref(ref: str, *, access: Access, backend_name: str, adapter_config, labelled) -> Subject:
    """A local folder (stdio, or a folder the operator allowed over HTTP) or a Hub repo.
    adapter_config(repo) -> dict | None reads a Hub repo's adapter_config.json, and labelled(repo) -> bool whether it
    holds labels.json (a classifier's classes)."""
    access.check_ref(ref, "model")
    if is_local(ref):
        if not backends.traits(backend_name).reads_local_paths and not backends.mounts_uploads(backend_name):
            words = backends.traits(backend_name).words
            raise TrainError(f"model {ref!r} is a local path, which {words.job} cannot read: push it to the "
                             f"Hub first, or use {words.instead}")
        folder = Path(ref).expanduser().resolve()
        if not folder.is_dir():
            raise NotFoundError(f"model {ref!r} is neither a folder on this machine nor a job_id from list_jobs")
        kind, base, method = _from_folder(folder, None, access)
        if kind == "adapter" and base and is_local(base):
            base = str((folder / base).resolve()) if not os.path.isabs(base) else base
            access.check_derived(base, "base model", f"the adapter {ref!r}")
        return Subject(ref=str(folder), kind=kind, base_model=base, method=method)
    config = adapter_config(ref)
    if config is None:
        return Subject(ref=ref, kind="full", base_model=None, method=None)
    return Subject(ref=ref, kind="adapter", base_model=config.get("base_model_name_or_path"),
                   method=methods.for_peft_task(config.get("task_type"), labelled=labelled(ref)))


def for_family(subject: Subject, family: Family | None, what: str, *,
               quantization: Quantization | None = None) -> Subject:
    """A model whose training this server does not know (a Hub repo, a folder) is planned for the family its own
    files say (models/family.py): an embedding model as a SentenceTransformer, a classifier by its head, a reward
    model by its one score; a family no follow-up can read, or a checkpoint stored in a format (`quantization`) no
    follow-up job loads, is refused with what to send instead. `what`: 'evaluation' or 'export'."""
    if subject.method is not None or family is None:
        return subject
    refusal = (followup_refusal(family, subject.ref, what)
               or followup_quantization_refusal(quantization, subject.ref, what))
    if refusal:
        raise TrainError(refusal)
    method = followup_method(family)
    return replace(subject, method=method) if method else subject
