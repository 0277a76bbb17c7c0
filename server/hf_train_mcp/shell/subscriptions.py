"""Subscriptions to hf-train://jobs/{job_id}: a subscribed client is told when the job's stage changes, so
"tell me when it finishes" needs no polling by the agent.

Both protocol generations are served. Legacy clients send resources/subscribe (MCPServer 2.3 has no public
hook for it, so the handlers are registered on its low-level server, as the SDK's own migration guide does) and
get notifications/resources/updated on their connection; 2026-07-28 clients open subscriptions/listen and get a
ResourceUpdated event from the bus. One poller per server (in its lifespan) reads the stages of the jobs someone
watches: those legacy clients subscribed to and those open listen streams asked for (the listen handler is
wrapped to see each stream's filter, which the bus does not show).
"""

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp.types import EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

log = logging.getLogger(__name__)
JOB_URI = "hf-train://jobs/{job_id}"
URI_PREFIX = "hf-train://jobs/"


def job_uri(job_id: str) -> str:
    return f"{URI_PREFIX}{job_id}"


class ListenerCountingBus(InMemorySubscriptionBus):
    """The in-process bus, counting open listen streams (no listener: no need to poll for them)."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners = 0

    def subscribe(self, listener: Callable[[Any], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        self.listeners += 1
        done = [False]

        def counted() -> None:
            if not done[0]:
                done[0] = True
                self.listeners -= 1
            unsubscribe()

        return counted


class JobWatcher:
    def __init__(self, get_core: Callable[[], Any], *, interval_s: float = 5.0) -> None:
        self.get_core = get_core
        self.interval_s = interval_s
        self.bus = ListenerCountingBus()
        self._legacy: dict[Any, set[str]] = {}  # connection -> subscribed job ids
        self._listened: Counter[str] = Counter()  # job id -> open listen streams that asked for it
        self._stages: dict[str, str] = {}  # last stage seen per job id

    def seen(self, job_id: str, stage: str) -> None:
        """A stage a reader already saw (a resource read): not news for the next poll."""
        self._stages[job_id] = stage

    def subscribe(self, connection: Any, uri: str) -> None:
        job_id = uri.removeprefix(URI_PREFIX)
        if connection not in self._legacy:
            self._legacy[connection] = set()
            connection.exit_stack.callback(self._legacy.pop, connection, None)  # dropped when it disconnects
        self._legacy[connection].add(job_id)

    def unsubscribe(self, connection: Any, uri: str) -> None:
        self._legacy.get(connection, set()).discard(uri.removeprefix(URI_PREFIX))

    def listening(self, uris: list[str]) -> Callable[[], None]:
        """A listen stream opened for these resources: their jobs are watched until the returned call."""
        jobs = [uri.removeprefix(URI_PREFIX) for uri in uris if uri.startswith(URI_PREFIX)]
        self._listened.update(jobs)

        def done() -> None:
            self._listened.subtract(jobs)
            self._listened += Counter()  # drops the jobs no stream asks for any more

        return done

    def _watched(self) -> set[str]:
        """Jobs whose stage someone asked to hear about: those legacy clients subscribed to and those the open
        listen streams named, however old (a stream only delivers the URIs it asked for)."""
        jobs = set().union(*self._legacy.values()) if self._legacy else set()
        return jobs | set(self._listened)

    def _read(self, jobs: set[str]) -> dict[str, str]:
        core, stages = self.get_core(), {}
        for job_id in jobs:
            try:
                stages[job_id] = core.job_stage(job_id)
            except Exception as exc:  # an unknown or unreachable job: nothing to announce
                log.info("not watching %s: %s", job_id, exc)
        return stages

    async def poll_once(self) -> list[str]:
        """Read the watched jobs' stages and announce the changes; returns the job ids announced."""
        jobs = self._watched()
        if not jobs:
            return []
        current = await anyio.to_thread.run_sync(self._read, jobs)
        changed = []
        for job_id, stage in current.items():
            previous = self._stages.get(job_id)
            self._stages[job_id] = stage
            if previous is not None and previous != stage:
                changed.append(job_id)
                await self.publish(job_uri(job_id))
        return changed

    async def publish(self, uri: str) -> None:
        await self.bus.publish(ResourceUpdated(uri=uri))  # 2026-07-28 listen streams
        job_id = uri.removeprefix(URI_PREFIX)
        for connection, jobs in list(self._legacy.items()):
            if job_id in jobs:
                await connection.send_resource_updated(uri)  # legacy: the connection's own stream; never raises

    async def run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception:  # the poller must outlive one bad read
                log.exception("job watch failed")
            await anyio.sleep(self.interval_s)


def register_subscriptions(mcp: Any, watcher: JobWatcher) -> None:
    """resources/subscribe and resources/unsubscribe for legacy clients (see the module docstring)."""

    async def on_subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        uri = str(params.uri)
        if uri.startswith(URI_PREFIX):
            job_id = uri.removeprefix(URI_PREFIX)
            try:  # the stage now is the baseline; a job this caller may not read is refused here
                watcher.seen(job_id, await anyio.to_thread.run_sync(watcher.get_core().job_stage, job_id))
            except Exception as exc:
                from mcp.shared.exceptions import MCPError
                from mcp.types import INVALID_PARAMS

                raise MCPError(INVALID_PARAMS, f"cannot subscribe to {uri}: {exc}") from None
            watcher.subscribe(ctx.session._connection, uri)  # noqa: SLF001 - no public handle in mcp 2.3
        return EmptyResult()

    async def on_unsubscribe(ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        watcher.unsubscribe(ctx.session._connection, str(params.uri))  # noqa: SLF001
        return EmptyResult()

    low = mcp._lowlevel_server  # noqa: SLF001
    low.add_request_handler("resources/subscribe", SubscribeRequestParams, on_subscribe)
    low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, on_unsubscribe)
    listen = low.get_request_handler("subscriptions/listen")
    if listen is not None:  # the SDK's handler serves the stream; this sees which resources it asked for
        async def on_listen(ctx: Any, params: Any) -> Any:
            done = watcher.listening([str(uri) for uri in params.notifications.resource_subscriptions or ()])
            try:
                return await listen.handler(ctx, params)
            finally:
                done()

        low.add_request_handler("subscriptions/listen", listen.params_type, on_listen)
