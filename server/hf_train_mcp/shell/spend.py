"""The question before a large spend or a large upload: when a launching tool's worst case is over the operator's
threshold, or the local files it would upload are, and the client can ask, the user confirms the plan (its terms
bound to what launches) before money is spent or files leave the machine."""

import inspect
import os
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field, ValidationError

from hf_train_mcp.errors import BudgetError, DeclinedError, TrainError, unexpected
from hf_train_mcp.jobs.uploads import shown_bytes
from hf_train_mcp.shell.runner import CodedToolError

CONFIRM_DEFAULT_USD = 10.0
CONFIRM_UPLOAD_DEFAULT_GB = 1.0  # a job's local files that the bucket lacks: more than this is the user's to decide
# the first protocol whose elicitation rides an InputRequiredResult between rounds (no question mid-call)
INPUT_REQUIRED_VERSION = "2026-07-28"


class Confirm(BaseModel):
    submit: bool = Field(description="Launch this job?")


def confirm_threshold() -> float | None:
    """Worst-case dollars above which a submission is confirmed with the user (HF_TRAIN_CONFIRM_ABOVE_USD; 'off'
    or an empty value turns it off)."""
    raw = os.environ.get("HF_TRAIN_CONFIRM_ABOVE_USD")
    if raw is None:
        return CONFIRM_DEFAULT_USD
    if raw.strip().lower() in ("", "off", "none", "never"):
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise BudgetError(f"this server's HF_TRAIN_CONFIRM_ABOVE_USD={raw!r} is not an amount of dollars; the "
                         "operator must fix it (e.g. 10, or off)") from None


def upload_threshold() -> float | None:
    """Bytes of a job's local files (those the bucket lacks) above which the upload is confirmed with the user
    (HF_TRAIN_CONFIRM_UPLOAD_ABOVE_GB, in decimal GB; 'off' or an empty value turns it off)."""
    raw = os.environ.get("HF_TRAIN_CONFIRM_UPLOAD_ABOVE_GB")
    if raw is None:
        return CONFIRM_UPLOAD_DEFAULT_GB * 1e9
    if raw.strip().lower() in ("", "off", "none", "never"):
        return None
    try:
        return max(0.0, float(raw)) * 1e9
    except ValueError:
        raise BudgetError(f"this server's HF_TRAIN_CONFIRM_UPLOAD_ABOVE_GB={raw!r} is not a number of GB; the "
                          "operator must fix it (e.g. 1, or off)") from None


def question_due(prepared: Any) -> bool:
    """Whether the plan is the user's to confirm: its worst case over the spend threshold, or its upload (what the
    bucket lacks, once counted) over the upload threshold."""
    spend, upload = confirm_threshold(), upload_threshold()
    uploading = getattr(prepared, "new_upload_bytes", None) or 0
    return (spend is not None and prepared.worst_case_cost_usd > spend) or (upload is not None and
                                                                             uploading > upload)


def can_elicit(ctx: Context) -> bool:
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def spend_terms(prepared: Any) -> tuple:
    """What a spend question binds: the script(s) by sha256, the flavor, the machines and the worst case. A plan
    launched on other terms was never asked about (a script URL edited, a preview planned again)."""
    runs = getattr(prepared, "runs", None)  # a sweep: each of its runs
    scripts = tuple(run.prepared.script.sha256 for run in runs) if runs is not None else (prepared.script.sha256,)
    return scripts, prepared.common["flavor"], prepared.nodes, round(prepared.worst_case_cost_usd, 2)


def confirmation_question(prepared: Any) -> str:
    """The server's own figures first: what a caller sent (a model name, say) cannot pass for them. A run across
    machines says how many, each at the flavor's price."""
    common = prepared.common
    hours = f", ~{common['estimated_hours']:.1f} h estimated" if common.get("estimated_hours") else ""
    estimate = f" (estimated ${common['estimated_cost_usd']:.2f})" if common.get("estimated_cost_usd") else ""
    nodes = getattr(prepared, "nodes", 1)
    machines = f"{nodes} machines x {common['flavor']}" if nodes > 1 else common["flavor"]
    price = getattr(getattr(prepared, "plan", None), "usd_per_hour", None)
    rate = f" (${price / nodes:.2f}/h each, ${price:.2f}/h together)" if nodes > 1 and price else ""
    uploading = getattr(prepared, "new_upload_bytes", None) or 0
    upload = (f"It first uploads {shown_bytes(uploading)} of your local files to your private jobs-artifacts "
              "bucket. " if uploading else "")
    return (f"{upload}It can bill at most ${prepared.worst_case_cost_usd:.2f}{estimate}: {machines}{rate} for up to "
            f"{common['timeout']}{hours}, billed per minute while it runs. Launch {prepared.summary} on {machines}?")


class Asked:
    """The terms (spend_terms) each call's spend question showed, from its resolver to its body: the same Context
    object travels from one to the other. A few are kept (a question answered in a later round leaves one)."""

    KEPT = 64

    def __init__(self) -> None:
        self._shown: dict[int, tuple[Context, tuple]] = {}

    def put(self, ctx: Context, terms: tuple) -> None:
        self._shown[id(ctx)] = (ctx, terms)
        while len(self._shown) > self.KEPT:
            self._shown.pop(next(iter(self._shown)))

    def pop(self, ctx: Context) -> tuple | None:
        shown = self._shown.pop(id(ctx), None)
        return shown[1] if shown is not None and shown[0] is ctx else None


def check_answer(confirmation: Any) -> None:
    """The user's answer to the question the resolver asked: anything but an accepted 'submit' launches nothing."""
    if confirmation is not None and not isinstance(confirmation, AcceptedElicitation):
        raise CodedToolError(f"not submitted: the user {confirmation.action}d the confirmation; nothing was "
                             "launched", "declined")
    if isinstance(confirmation, AcceptedElicitation) and isinstance(confirmation.data, Confirm) and \
            not confirmation.data.submit:
        raise CodedToolError("not submitted: the user chose not to launch it; nothing was launched", "declined")


def bound_confirmation(ctx: Context, shown: tuple | None) -> Callable[[Any], None]:
    """The body's check of the plan it is about to launch, in the worker thread: a plan over the threshold, or
    any plan on other terms than the question showed (a script URL edited while the user read it, a preview
    that expired and was planned again), is asked about again where the client takes a question mid-call (the
    older protocol), and refused where it does not (the user then answers about the plan that launches)."""
    def check(prepared: Any) -> None:
        terms = spend_terms(prepared)
        if terms == shown:
            return
        if shown is None and (not question_due(prepared) or not can_elicit(ctx)):
            return  # no question was due: the budget caps govern
        if ctx.protocol_version is None or is_version_at_least(ctx.protocol_version, INPUT_REQUIRED_VERSION):
            raise DeclinedError("not submitted: the plan changed after the spend question was asked (now: "
                                f"{confirmation_question(prepared)}); nothing was launched: call again to be asked "
                                "about this plan")
        answer = anyio.from_thread.run(ctx.elicit, confirmation_question(prepared), Confirm)
        if not (isinstance(answer, AcceptedElicitation) and isinstance(answer.data, Confirm) and answer.data.submit):
            raise DeclinedError("not submitted: the user did not confirm the plan as it changed after the first "
                                "question; nothing was launched")

    return check


def confirmation_resolver(spec: Any, get_core: Callable[[], Any], asked: Asked,
                          names: list[str]) -> Callable[..., Any]:
    """Resolves a launching tool's hidden `confirmation` (`names`: the tool's parameters): plans the submission
    (kept for the body, which does not plan again) and, when its worst case is over the threshold and the client
    can ask, asks the user; what the question showed goes to the body, which launches only a plan on those terms."""

    async def resolver(ctx: Context, **arguments: Any) -> Elicit[Confirm] | None:
        try:
            req = spec.request(**arguments)
        except ValidationError:
            return None  # the body reports it
        if getattr(req, "dry_run", False) or getattr(req, "measure", True) is False:
            return None  # launches nothing
        try:
            thresholds = (confirm_threshold(), upload_threshold())
        except TrainError as exc:  # the operator's setting is unreadable: nothing launches until it is fixed
            raise CodedToolError(str(exc), exc.code) from None
        if thresholds == (None, None) or not can_elicit(ctx):
            return None  # clients that cannot ask are governed by the budget and upload caps alone
        prepared = await _previewed(spec, get_core(), req)
        if prepared is None or not question_due(prepared):
            return None
        asked.put(ctx, spend_terms(prepared))
        return Elicit(confirmation_question(prepared), Confirm)

    parameters = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    parameters += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in names]
    resolver.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    resolver.__annotations__ = {"ctx": Context}
    return resolver


async def _previewed(spec: Any, core: Any, req: Any) -> Any:
    """The plan the question is about (None: an earlier submission with this idempotency key answers instead)."""

    def preview() -> Any:
        with core.access.serving():
            if getattr(req, "idempotency_key", None) and core.existing_submission(req) is not None:
                return None
            prepared = core.preview(req, kind=spec.launches)
            if prepared is not None and upload_threshold() is not None:
                core.count_uploads(prepared)  # what the bucket lacks: the upload question's figure
            return prepared

    try:
        return await anyio.to_thread.run_sync(preview)
    except Exception as exc:  # a question that could not be asked is a refusal, never a pass
        text = str(exc) if isinstance(exc, TrainError) else unexpected(spec.name, exc, remote=core.access.remote)
        raise CodedToolError(f"{text} (the spend confirmation could not be prepared, so nothing was launched)",
                             exc.code if isinstance(exc, TrainError) else "unexpected") from None
