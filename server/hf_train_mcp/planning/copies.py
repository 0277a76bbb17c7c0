"""Which uploaded copy of a local file a job mounts instead of one planned from the file as it is now: a sweep's
later runs read the copy its launched runs uploaded (sent once, mounted into each), and a resumed run whose local
dataset is gone reads the copy its checkpoint's job read, and a follow-up of a job whose local base model is gone
sizes it by the config.json its upload recorded. Copies are the ledger's upload records (jobs/uploads.py
Upload.recorded)."""

import json
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from hf_train_mcp.access import Access, is_local
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.errors import DatasetError
from hf_train_mcp.jobs import keys
from hf_train_mcp.jobs.ledger import Ledger
from hf_train_mcp.jobs.records import SweepRunRecord
from hf_train_mcp.jobs.uploads import check_total, named_uploads, plan_dataset, plan_folder
from hf_train_mcp.bucket_inputs import Upload
from hf_train_mcp.paths import data_home
from hf_train_mcp.planning.hyperparameters import DataFacts
from hf_train_mcp.planning.subjects import Subject


def sweep_copies(ledger: Ledger, req: TrainingRequest) -> list[dict]:
    """A sweep run's local files as the sweep's launched runs uploaded them: every run reads the copy the sweep
    was approved with, never the local file as it is when its turn comes."""
    sweep_id = keys.sweep_of(req.idempotency_key)
    if sweep_id is None:
        return []
    runs = ledger.sweep_runs(sweep_id)
    index = int(req.idempotency_key.rpartition("-")[2])
    mine = next((run for run in runs if run.idx == index), None)
    # a grid over column_mapping naming other image columns of the same file: another upload, another copy (other
    # text columns: the same bytes, the sweep's one copy)
    columns = _image_columns(mine) if mine else None
    return _sweep_uploads(ledger, [run for run in runs if mine is None or _image_columns(run) == columns])


def uploads_for(refs: list[tuple[str | None, str]], *, access: Access, mapping: dict[str, str] | None,
                recorded: list[dict] = ()) -> list[Upload]:
    """The uploads of the local paths among `refs` ((ref, role) pairs): a copy a job already read (`recorded`,
    a follow-up's parent's) as it is, else planned from the local files."""
    known = {entry["ref"]: Upload.from_record(entry) for entry in recorded}
    out = [known.get(ref) or (plan_dataset(ref, mapping=mapping, access=access) if role == "dataset"
                              else plan_folder(ref, role, access))
           for ref, role in refs if ref and is_local(ref)]
    check_total(out)
    return out


def training_uploads(ledger: Ledger, req: TrainingRequest, data: DataFacts, resumed: dict[str, dict],
                     access: Access) -> list[Upload]:
    """A training run's uploads: its sweep's copies and those of the job it resumes where the local files are
    gone, the rest planned; the dataset's carries this run's facts (a run resumed on the copy plans by them, and a
    sweep's copy is read by runs of other mappings too)."""
    refs = [(req.model, "model"), (req.dataset, "dataset"), (req.teacher_model, "teacher model")]
    uploads = uploads_for(refs, access=access, mapping=req.column_mapping,
                          recorded=[*sweep_copies(ledger, req), *resumed.values()])
    return [replace(u, facts=asdict(data)) if u.role == "dataset" else u for u in uploads]


def _image_columns(run: SweepRunRecord) -> list[str]:
    """The columns whose images a run's upload holds (as jobs/uploads._named_images finds them)."""
    mapping = json.loads(run.request_json).get("column_mapping") or {}
    return [mapping.get(name, name) for name in ("image", "images")]


def _sweep_uploads(ledger: Ledger, runs: list[SweepRunRecord]) -> list[dict]:
    jobs = [ledger.get(run.job_id) for run in runs if run.job_id]
    return [entry for job in jobs if job is not None for entry in job.uploads]


def sweep_data_edited(ledger: Ledger, sweep_id: str, base: dict[str, Any], access: Access) -> bool:
    """Whether a local file the sweep's launched runs uploaded holds other bytes now: a retry with the sweep's key
    is then a conflict, not the old sweep passed off as trained on them. Each run is held to its own upload (a
    grid over column_mapping uploads other images), and the files are the ones its call names now (`base` and
    the run's grid values: a link resolved when the sweep was approved may point at other rows since). A file
    gone, or a sweep that uploaded nothing yet, cannot tell (as a job's retry: jobs/uploads.named_content)."""
    planned: dict[str, list] = {}
    for run in ledger.sweep_runs(sweep_id):
        job = ledger.get(run.job_id) if run.job_id else None
        if job is None or not job.uploads:
            continue
        named = {**base, **run.params}
        arguments = {**json.loads(run.request_json), **{name: named[name] for name in _PATHS if named.get(name)}}
        key = json.dumps([arguments.get(name) for name in (*_PATHS, "column_mapping")])
        if key not in planned:
            planned[key] = named_uploads(arguments, access, recorded=job.uploads) or []
        recorded = {entry["role"]: entry["digest"] for entry in job.uploads}
        if any(recorded.get(u.role, u.digest) != u.digest for u in planned[key]):
            return True
    return False


_PATHS = ("model", "dataset", "teacher_model")
_RESUMED = (("dataset", "dataset"), ("model", "model"), ("teacher_model", "teacher model"))


def resumed_copies(ledger: Ledger, req: TrainingRequest) -> dict[str, dict]:
    """The uploads of the local dataset and model folders that the job `resume_from` names read, by role, for
    those no longer here (moved, deleted): the bucket still holds the very bytes the checkpoint was trained from."""
    previous = ledger.get(req.resume_from) if req.resume_from else None
    found = {}
    for name, role in _RESUMED:
        ref = getattr(req, name)
        if not ref or not is_local(ref) or Path(ref).exists():
            continue
        entry = next((e for e in (previous.uploads if previous else []) if e["role"] == role and e["ref"] == ref),
                     None)
        if entry is not None:
            found[role] = entry
    return found


def from_copy(ledger: Ledger, req: TrainingRequest, copy: dict) -> tuple[TrainingRequest, DataFacts, list[str]]:
    """A resumed run on the copy its job read: that job's validated mapping and config (where this call sends
    none), planned by the facts its validation found (images, conversations), and said."""
    prior = TrainingRequest.model_validate_json(ledger.get(req.resume_from).request_json)
    if any((prior.column_mapping or {}).get(to, to) != source for to, source in (req.column_mapping or {}).items()):
        # the copy holds the images the job's mapping named, and its facts are that mapping's: another one is data
        # no validation has seen, whose images the job cannot open
        raise DatasetError(
            f"{Path(req.dataset).name} is no longer on this machine, and the copy job {req.resume_from} trained on "
            f"was validated with column_mapping {json.dumps(prior.column_mapping)}, which this call changes: resume "
            "with that column_mapping (or none), or put the file back. Nothing was uploaded or launched.")
    req = req.model_copy(update={"column_mapping": req.column_mapping or prior.column_mapping,
                                 "dataset_config": req.dataset_config or prior.dataset_config})
    facts = dict(copy.get("facts") or {})
    if facts.get("image_pixels"):
        facts["image_pixels"] = tuple(facts["image_pixels"])
    known = {f.name for f in fields(DataFacts)}
    return req, DataFacts(**{k: v for k, v in facts.items() if k in known}), [
        f"{Path(req.dataset).name} is no longer on this machine: the run reads the copy job {req.resume_from} trained "
        f"on ({copy['place']}, sha256 {copy['digest'][:12]}), validated when that job was submitted"]


def resumed_on_other_data(ledger: Ledger, req: TrainingRequest, uploads: list[Upload]) -> list[str]:
    """A resumed run whose local dataset is not the bytes its checkpoint was trained on says so."""
    previous = ledger.get(req.resume_from) if req.resume_from else None
    before = {e["ref"]: e["digest"] for e in (previous.uploads if previous else []) if e["role"] == "dataset"}
    return [f"{Path(u.ref).name} changed since job {req.resume_from} trained on it (sha256 {before[u.ref][:12]}, "
            f"now {u.digest[:12]}): the resumed run trains on the file as it is now"
            for u in uploads if u.role == "dataset" and before.get(u.ref, u.digest) != u.digest]


def sizing_folder(subject: Subject) -> str | None:
    """Where a follow-up sizes a job's uploaded model folder from once the local folder is gone: the config.json
    its upload recorded, written to a folder of the server's named by the upload's digest."""
    ref = subject.sized_by
    if subject.job is None or not is_local(ref) or Path(ref).exists():
        return None
    return config_folder(next((e for e in subject.job.uploads if e["ref"] == ref), None))


def config_folder(entry: dict | None) -> str | None:
    """A folder holding the config.json an uploaded model folder's record kept (None without one)."""
    if entry is None or not entry.get("config"):
        return None
    folder = data_home() / "uploaded-configs" / entry["digest"][:32]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(entry["config"])
    return str(folder)
