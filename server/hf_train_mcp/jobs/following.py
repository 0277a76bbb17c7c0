"""Following jobs: status (stage, progress, metrics, next step), logs, cancel and the list, on any backend.

Never waits on a job: each call reads the backend once (or the ledger, once a job's end is recorded) and says
what to do next.
"""

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from hf_train_mcp import backends, credentials

from hf_train_mcp.jobs import duplicates

from hf_train_mcp.jobs import node_ranks
from hf_train_mcp.backends.base import Backend, JobGone, JobState, LogRead
from hf_train_mcp.stages import TERMINAL_STAGES
from hf_train_mcp.errors import TrainError, NotFoundError
from hf_train_mcp.estimate.hardware import get_catalog
from hf_train_mcp.hub import HubUnreachable, hub_token, resolve_identity, scrub
from hf_train_mcp.durations import minutes_since
from hf_train_mcp.access import Access
from hf_train_mcp.jobs.ledger import JobRecord, Ledger
from hf_train_mcp.stages import SETTLED_STAGES
from hf_train_mcp.jobs.telemetry import memory_advice
from hf_train_mcp.jobs.logs import OUT_OF_MEMORY, ParsedLog, parse_log, probe_metrics
from hf_train_mcp.contract.results import CancelResult, JobList, JobReport, JobSummary, LogPage, NodeStage
from hf_train_mcp.jobs.telemetry import GpuTelemetry

log = logging.getLogger(__name__)
STATUS_LOG_LINES = 300  # read more than we show: the last HFTM_LOG line may sit above warnings
SCHEDULING_ALERT_MIN = 15
SETTLED_LOGS_CACHED = 256  # finished jobs whose last log lines are kept in memory (their logs never change)


@dataclass(frozen=True)
class Located:
    """A job found: its backend, bare id, namespace, ledger record (None for a job this server did not launch) and
    its state as the backend (or the ledger, once it has ended) says."""

    backend: Backend
    job_id: str
    namespace: str | None
    record: JobRecord | None
    state: JobState


@dataclass(frozen=True)
class Reading:
    """A job's report and its preflight measurement (from its log, or the ledger once seen)."""

    report: JobReport
    measured: dict | None


class Following:
    def __init__(self, *, access: Access, ledger: Callable[[], Ledger], backend: Callable[[str], Backend],
                 recover: Callable[[], None]) -> None:
        """ledger(): the ledger, opened on first use; backend(name) opens a backend; recover() looks up the
        submissions whose server died mid-POST (the launcher's crash recovery), before any job is read."""
        self.access, self.backend = access, backend
        self._ledger, self._recover = ledger, recover
        self._settled_logs: OrderedDict[str, tuple[int, LogRead, ParsedLog]] = OrderedDict()
        self.telemetry = GpuTelemetry()

    @property
    def ledger(self) -> Ledger:
        return self._ledger()

    def _locate(self, job_id: str) -> tuple[str, str, str | None, JobRecord | None]:
        """(backend, bare job id, namespace, ledger record) for a job id or 'namespace/job_id'."""
        job_id = job_id.strip()
        record = self.ledger.get(job_id)
        if record is not None:
            return record.backend, job_id, record.namespace, record
        if self.access.remote:  # a remote caller reaches the jobs this server launched, not all of the token's
            raise NotFoundError(f"no job {job_id!r} was launched through this server: pass a job_id from list_jobs")
        owner = backends.owner_of(job_id)
        if not backends.traits(owner).has_namespace:
            return owner, job_id, None, None
        if "/" in job_id:
            namespace, bare = job_id.rsplit("/", 1)
            return owner, bare, namespace, self.ledger.get(bare)
        return owner, job_id, resolve_identity(hub_token()).name, None

    def state(self, job_id: str) -> Located:
        backend_name, bare, namespace, record = self._locate(job_id)
        backend = self.backend(backend_name)
        # its stage can no longer change: no need to ask the backend, once an inspect has recorded how it ended
        if record is not None and record.settled and record.finished_at:
            return Located(backend, bare, namespace, record, JobState(
                stage=record.stage, message=record.message, created_at=record.created_at,
                started_at=record.started_at, finished_at=record.finished_at, url=record.job_url))
        try:
            state = backend.inspect(bare, namespace)
        except JobGone:
            if record is None:
                raise
            state = JobState(stage="DELETED", message="the backend no longer has this job (deleted, or expired)",
                             created_at=record.created_at, url=record.job_url)
        except HubUnreachable as exc:
            if record is None:
                raise
            state = JobState(stage=record.stage, created_at=record.created_at, finished_at=record.finished_at,
                             url=record.job_url, stale=f"{exc} Showing the last known state from the ledger.")
        if record is not None and (record.stage != state.stage or state.stage in SETTLED_STAGES):
            self.ledger.update_stage(bare, state.stage, state.finished_at, started_at=state.started_at,
                                     message=state.message)
        return Located(backend, bare, namespace, record, state)

    def report(self, job_id: str, tail: int) -> Reading:
        """The job's report and its preflight measurement (from the log, or the ledger once seen)."""
        self._recover()
        found = self.state(job_id)
        backend, bare, namespace, record, state = found.backend, found.job_id, found.namespace, found.record, found.state
        copies = duplicates.stop_copies(self, record) if record is not None and record.doubted else ([], [])
        # read in the background while the log is: a slow metrics stream then costs job_status no extra time
        gpus = self.telemetry.start(backend, bare, namespace, stage=None if state.stale else state.stage,
                                    flavor=record.flavor if record else None)
        read, parsed = self._status_logs(backend, bare, namespace, record, state, tail)
        parsed = replace(parsed, metrics=dict(parsed.metrics))  # the cached parse stays as read
        measured = parsed.probe or (record.measured if record else None)
        if parsed.probe and record is not None and record.measured != parsed.probe:
            self.ledger.set_measured(bare, parsed.probe)
        if measured and not parsed.probe:  # the preflight line has scrolled out of the tail
            parsed.metrics.update(probe_metrics(measured))
        error = None
        if state.stage == "ERROR":
            error = parsed.error or state.message or "the job failed without an error line; read log_tail"
        trackio_url = record.trackio_url if record else None
        model_url = record.model_url if record else None
        next_step = state.stale or self._next_step(state, parsed, bare, record, trackio_url, model_url)
        if read.note:
            next_step += f" ({read.note}: the log tail may be short; job_logs reads it again)"
        gpu = gpus()
        next_step += self.telemetry.hint(backend, bare, gpu, started_at=state.started_at,
                                         stepping=parsed.progress.step is not None, record=record)
        if copies[0]:  # the bill shows the copy: say why
            next_step += (f" The Hub made this submission twice (a POST answered after the client gave up): canceled "
                          f"the copy {', '.join(copies[0])}.")
        report = JobReport(
            job_id=bare, backend=backend.name, stage=state.stage, message=state.message,
            job_url=state.url or (record.job_url if record else None), created_at=state.created_at,
            started_at=state.started_at, finished_at=state.finished_at, progress=parsed.progress,
            last_metrics=parsed.metrics, log_tail=read.lines[-tail:] if tail else [], error=error,
            trackio_url=trackio_url, model_url=model_url, next_step=next_step, stale=bool(state.stale), gpu=gpu,
        )
        return Reading(self._as_run(report, record) if node_ranks.is_run(record) else report, measured)

    def _as_run(self, report: JobReport, run: JobRecord) -> JobReport:
        """Rank 0's report as the run's: its stage made of every node's, the first node error, each node's stage;
        a node that failed, went missing or never started stops the others here (and in the run's watcher)."""
        states = node_ranks.node_states(self, run, report.stage, report.error or report.message)
        halted = node_ranks.enforce(self, run, states)
        stop = halted[1] if halted else None
        stage = node_ranks.run_view(stop.states if stop else states, stop)
        failed = next((s for s in states if s.stage == "ERROR"), None)
        error = report.error or (f"node {failed.rank}: {failed.message or 'failed'}" if failed else None)
        current = self.ledger.get(run.job_id) or run
        message = halted[0] if halted else (current.message or report.message)
        if current.stopped and not (message or "").startswith(current.stopped):  # rank 0's own word replaced it
            message = f"{current.stopped}: the run was stopped"
        next_step = report.next_step
        if halted or current.stopped or (stage in ("ERROR", "CANCELED") and report.stage not in ("ERROR", "CANCELED")):
            next_step = (f"{message}. Fix the cause and submit again with a new idempotency_key; job_logs pages a "
                         "node's log by its job id (nodes).")
        nodes = [NodeStage(rank=s.rank, job_id=s.job_id, stage=s.stage) for s in (stop.states if stop else states)]
        return report.model_copy(update={"stage": stage, "error": error, "message": message, "nodes": nodes,
                                         "next_step": next_step})

    def job_state(self, job_id: str) -> JobState:
        """One job's state (a node's, or rank 0's alone)."""
        return self.state(job_id).state

    def _status_logs(self, backend: Backend, job_id: str, namespace: str | None, record: JobRecord | None,
                     state: JobState, tail: int) -> tuple[LogRead, ParsedLog]:
        """The log lines job_status shows and what they say; a settled job's are read once and kept."""
        wanted = max(tail, STATUS_LOG_LINES)
        cached = self._settled_logs.get(job_id)
        if cached is not None and (cached[0] >= wanted or len(cached[1].lines) < cached[0]):  # or the whole log
            self._settled_logs.move_to_end(job_id)
            return cached[1], cached[2]
        if state.stage in ("SCHEDULING", "DELETED") or state.stale:
            return LogRead([]), parse_log([])
        read = self._logs(backend, job_id, namespace, record, tail=wanted, finished=state.stage in TERMINAL_STAGES)
        parsed = parse_log(read.lines)
        # kept once the log is known to be whole: the Hub's log can lag its stage, so wait for the final line
        finished_log = parsed.done or parsed.error is not None or backend.logs_final_when_settled
        if state.stage in SETTLED_STAGES and read.complete and finished_log:
            self._settled_logs[job_id] = (wanted, read, parsed)
            while len(self._settled_logs) > SETTLED_LOGS_CACHED:
                self._settled_logs.popitem(last=False)
        return read, parsed

    def _next_step(self, state: JobState, parsed, job_id: str, record: JobRecord | None, trackio_url: str | None,
                   model_url: str | None) -> str:
        stage = state.stage
        if stage == "SCHEDULING":
            waited = minutes_since(state.created_at)
            if waited is not None and waited >= SCHEDULING_ALERT_MIN and record and record.flavor:
                others = self._alternative_flavors(record.flavor, record.backend)
                return (f"Still waiting for {record.flavor} hardware after {waited:.0f} min: it may be scarce right "
                        f"now. cancel_job and resubmit with another flavor that fits"
                        + (f", e.g. {', '.join(others)}" if others else "") + " (estimate_cost lists them).")
            return ("Waiting for hardware: check again in a minute. If it stays in SCHEDULING for over "
                    f"{SCHEDULING_ALERT_MIN} minutes, cancel_job and resubmit on another flavor.")
        if trackio_url and trackio_url.startswith("file://"):
            folder = trackio_url.removeprefix("file://")
            dashboard = f" Dashboard: TRACKIO_DIR={folder} trackio show --project hf-train-mcp."
        else:
            dashboard = f" Live curves: {trackio_url}." if trackio_url else ""
        kind = record.kind if record else "train"
        if stage == "RUNNING":
            done = f"{parsed.progress.percent}% done" if parsed.progress.percent is not None else "starting up"
            doing = {"evaluate": "The evaluation", "export": "The export", "probe": "The measurement"}.get(kind, "Training")
            return f"{doing} is {done}; check again in a few minutes (do not poll in a tight loop).{dashboard}"
        if stage == "COMPLETED" and kind == "evaluate":
            return ("Evaluated: the results are in last_metrics, in the model card's Evaluation section and in the "
                    f"Trackio project; the HFTM_SAMPLE lines of job_logs compare base and fine-tuned answers.{dashboard}")
        if stage == "COMPLETED" and kind == "export":
            return f"Exported: the model is at {model_url}." if model_url else "Exported."
        if stage == "COMPLETED":
            return (f"Finished. The model is at {model_url}; evaluate_model(model='{job_id}') measures it on held-out "
                    "data." if model_url else "Finished.") + dashboard
        if stage == "ERROR" and parsed.out_of_memory and record is not None:  # advice that fits this job
            return OUT_OF_MEMORY + memory_advice(method=record.method, request=record.request, kind=record.kind) + "."
        if stage == "ERROR":
            return parsed.hint or (f"Read error and log_tail, fix the cause, then resubmit (resume_from='{job_id}' "
                                   "continues from the last checkpoint).")
        if stage == "CANCELED":
            return f"Canceled. Resubmit with resume_from='{job_id}' to continue from the last checkpoint."
        return "The job no longer exists on the backend; its pushed checkpoints and model repo, if any, remain."

    @staticmethod
    def _alternative_flavors(flavor: str, backend: str) -> list[str]:
        """Other GPU flavors with at least as much memory per GPU, cheapest first (hardware is scarce per type)."""
        catalog = get_catalog(offline=True, backend=backend)
        current = catalog.flavors.get(flavor)
        if current is None or current.gpu is None:
            return []
        others = [f for f in catalog.flavors.values() if f.gpu is not None and f.name != flavor
                  and f.gpu.model != current.gpu.model and f.gpu_memory_gb >= current.gpu_memory_gb]
        return [f.name for f in sorted(others, key=lambda f: f.usd_per_hour)[:3]]

    @staticmethod
    def _logs(backend: Backend, job_id: str, namespace: str | None, record: JobRecord | None, *, tail: int | None,
              finished: bool, upto: int | None = None) -> LogRead:
        """Log lines with this server's token and credentials masked, and every secret the job was handed (named
        in the call or chosen by its script's header, as its record says): a job that prints its environment must
        not leak them."""
        named = record.secret_names if record is not None else ()
        token, mask = hub_token(), credentials.masker(named)
        read = backend.logs(job_id, namespace, tail=tail, finished=finished, upto=upto)
        read.lines = [mask(scrub(line, token)) for line in read.lines]
        return read

    def job_logs(self, job_id: str, offset: int = 0, limit: int = 200) -> LogPage:
        found = self.state(job_id)
        backend, bare, namespace, record, state = found.backend, found.job_id, found.namespace, found.record, found.state
        if state.stale:
            raise HubUnreachable(state.stale.removesuffix(" Showing the last known state from the ledger.") +
                                 " The logs live on the Hub: try again in a minute.")
        finished = state.stage in TERMINAL_STAGES
        read = LogRead([]) if state.stage in ("SCHEDULING", "DELETED") else self._logs(  # upto +1: is there more?
            backend, bare, namespace, record, tail=None, finished=finished, upto=offset + limit + 1)
        page = read.lines[offset:offset + limit]
        next_offset = offset + len(page)
        return LogPage(job_id=bare, offset=offset, lines=page, next_offset=next_offset,
                       finished=finished and read.complete and next_offset >= len(read.lines), note=read.note)

    def list_jobs(self, stage: str | None = None, limit: int = 20) -> JobList:
        self._recover()
        jobs = []
        unreachable = set()  # backends that did not answer: the rest of the list comes from the ledger
        # Local jobs are this machine's; a caller who may not run them here may not read them either.
        only = backends.permitted(local_jobs=self.access.local_jobs)
        for record in self.ledger.list(limit=limit * 3 if stage else limit, backends=only):
            current, stale = record.stage, False
            if current not in TERMINAL_STAGES:
                try:
                    if record.backend in unreachable:
                        raise HubUnreachable("skipped")
                    state = self.backend(record.backend).inspect(record.job_id, record.namespace)
                    current = state.stage
                    if current != record.stage:
                        self.ledger.update_stage(record.job_id, current, state.finished_at,
                                                 started_at=state.started_at, message=state.message)
                except JobGone:
                    current = "DELETED"
                    self.ledger.update_stage(record.job_id, current)
                except HubUnreachable:
                    unreachable.add(record.backend)
                    stale = True
                except TrainError as exc:
                    log.info("could not refresh %s: %s", record.job_id, exc)
                    stale = True
            if stage and current != stage:
                continue
            jobs.append(JobSummary(job_id=record.job_id, backend=record.backend, stage=current,
                                   created_at=record.created_at, model=record.model, method=record.method,
                                   hub_model_id=record.hub_model_id, job_url=record.job_url, stale=stale))
            if len(jobs) >= limit:
                break
        return JobList(jobs=jobs)

    def cancel(self, job_id: str) -> CancelResult:
        """Cancel a job, or every node of a run, and every other job its submission's label names (a POST
        answered late made a copy). A node that could not be canceled is said, and its run's watcher retries."""
        record = self.ledger.get(job_id.strip())
        if node_ranks.is_run(record):
            rank0 = self.job_state(record.job_id)
            states = node_ranks.node_states(self, record, rank0.stage, rank0.message)
            stop = node_ranks.cancel_nodes(self, record, states)
            said, unsure = "", False
            for node in (record, *node_ranks.nodes_of(self.ledger, record)):
                text, problem = self._cancel_copies(node, search=not unsure)  # a Hub that fails: not N times
                said, unsure = said + text, unsure or problem
            if stop.failed or stop.unknown or unsure:
                node_ranks.ensure_watched(record)
            return CancelResult(job_id=record.job_id, stage=node_ranks.run_view(stop.states, stop),
                                message=node_ranks.cancel_said(stop) + said)
        try:
            result = self.cancel_one(job_id)
        finally:  # the copies too, even when the job's own cancel failed
            said, _ = self._cancel_copies(record)
        return result.model_copy(update={"message": result.message + said}) if said else result

    def _cancel_copies(self, record: JobRecord | None, *, search: bool = True) -> tuple[str, bool]:
        """Cancel every other job of the record's submission (`search`: looked up by its label, else those
        recorded): what to add to the answer, and whether some may still run."""
        canceled, problems = duplicates.stop_copies(self, record, search=search)
        return duplicates.said(canceled, problems), bool(problems)

    def cancel_one(self, job_id: str) -> CancelResult:
        found = self.state(job_id)
        backend, bare, namespace, record, state = found.backend, found.job_id, found.namespace, found.record, found.state
        if state.stage in TERMINAL_STAGES:
            return CancelResult(job_id=bare, stage=state.stage, message=f"already {state.stage}; nothing to cancel")
        backend.cancel(bare, namespace)
        after = backend.inspect(bare, namespace)
        if record is not None:  # the backend's word (the job may still be RUNNING while it stops)
            self.ledger.update_stage(bare, after.stage, after.finished_at, started_at=after.started_at,
                                          message=after.message)
        return CancelResult(job_id=bare, stage=after.stage, message=backend.cancel_note)
