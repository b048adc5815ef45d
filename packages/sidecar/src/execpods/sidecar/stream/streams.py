"""The open StreamSnapshots calls: each one's inbox, encoder and position, and what they share.

`Streams.open` opens one stream on the backend (one `StreamHandle`: snapshots, numbered removals,
the application's failure, notices) into a `StreamFeed`, and `Stream.messages` turns what the feed
collects into serialized messages: the snapshots from the `EncodingCache` all streams share, each
message carrying the stream's position, and every large message waiting its turn in the
`SendBudget` all streams share. `Streams.close` ends every stream cleanly at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from execpods.core import Position, StreamHandle
from execpods.sidecar.stream.encoding import EncodingCache, SnapshotEncoder
from execpods.sidecar.stream.feed import StreamFeed
from execpods.sidecar.stream.messages import StreamCursor, build_response
from execpods.sidecar.stream.sendbudget import SendBudget
from execpods.sidecar.telemetry.hub import StreamTelemetry
from execpods.sidecar.wiring import Runtime

logger = logging.getLogger(__name__)


class ShuttingDown(RuntimeError):
    """The sidecar is stopping: no new stream opens."""


class Stream:
    """One open stream: call `messages()` once, to the end (it releases everything)."""

    def __init__(
        self,
        streams: Streams,
        feed: StreamFeed,
        handle: StreamHandle,
        telemetry: StreamTelemetry,
    ) -> None:
        self._streams = streams
        self._feed = feed
        self._handle = handle
        self._telemetry = telemetry

    async def messages(self) -> AsyncIterator[bytes]:
        """Serialized `StreamSnapshotsResponse`s until the stream is closed or abandoned."""
        try:
            async for message in self._serialized():
                yield message
                self._telemetry.sent()
        finally:
            self._telemetry.close()
            self._handle.cancel()
            self._streams._ended(self._feed)

    async def _serialized(self) -> AsyncIterator[bytes]:
        # The feed holds removals back until its first snapshot, so the first message that
        # carries anything carries the current snapshot.
        encoder = SnapshotEncoder(self._streams.cache)
        cursor = StreamCursor(self._handle.start, resync=self._handle.resync)
        budget = self._streams.budget
        first = True
        while True:
            await self._feed.wait()
            pending = self._feed.take()
            if pending:
                for message in build_response(encoder, pending, first=first, cursor=cursor):
                    with await budget.turn(message.size):
                        yield message.join()  # the share is held until gRPC has taken it
                first = False
            if self._feed.closed:
                return


class Streams:
    """Every open stream of one servicer, and the cache and send budget they share."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self.cache = EncodingCache()
        self.budget = SendBudget(runtime.settings.sidecar.stream_send_budget_mib << 20)
        self._feeds: set[StreamFeed] = set()
        self._closing = False

    def open(self, *, interval: float, resume_from: Position | None) -> Stream:
        """Open a stream on the backend (from the event loop's thread).

        Raises `InvalidPosition` for a resume position this sidecar never sent, and
        `RuntimeError` (`ShuttingDown` among them) when no stream can open.
        """
        if self._closing:
            raise ShuttingDown("the sidecar is shutting down")
        feed = StreamFeed(
            asyncio.get_running_loop(),
            max_pending=self._runtime.settings.sidecar.stream_max_pending,
        )
        telemetry = self._runtime.telemetry.stream()
        try:
            handle = self._runtime.backend.open_stream(
                interval,
                on_snapshots=telemetry.arrived(feed.on_snapshots),
                on_removal=feed.on_removal,
                on_application_failure=feed.on_application_failed,
                on_notice=feed.on_notice,
                resume_from=resume_from,
            )
        except BaseException:
            telemetry.close()
            raise
        self._feeds.add(feed)
        logger.debug(
            "A stream subscribed every %.3f s (%d open)%s.",
            interval,
            len(self._feeds),
            _resumed(handle, resume_from),
        )
        return Stream(self, feed, handle, telemetry)

    def close(self) -> None:
        """End every open stream after what it has pending, and open no more (shutdown)."""
        self._closing = True
        for feed in list(self._feeds):
            feed.close()

    def _ended(self, feed: StreamFeed) -> None:
        self._feeds.discard(feed)
        logger.debug("A stream ended (%d open).", len(self._feeds))


def _resumed(handle: StreamHandle, resume_from: Position | None) -> str:
    if resume_from is None:
        return ""
    flag = ", re-syncing" if handle.resync else ""
    return f", resumed after removal {resume_from.sequence} with {len(handle.backlog)} missed{flag}"
