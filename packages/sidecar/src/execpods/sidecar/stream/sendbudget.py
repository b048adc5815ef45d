"""A bound on the bytes of large stream messages on their way out at once, across all streams.

A full snapshot of 10,000 executors is about a megabyte. When a poll's full list reaches 100
streams, or 100 streams open together, every stream has one to send at the same moment: each
joined the shared encoding with its own fields into a message of its own, and gRPC copied that
again. The load command saw the peaks: 230 MiB against 160 at rest at 10,000 executors (RSS
sampled every 0.1 s).

A stream takes its message's size from the budget (`execpods.sidecar.stream.sendBudget`) before
joining it, and gives it back once gRPC has taken it: so the sidecar's own copies of large
messages stay within that many bytes, however many streams there are (gRPC's transport may still
be writing out messages it has taken; the budget cannot see those). Measured back to back, a
budget of 8 MiB against none: peaks of 174 and 179 MiB against 212 and 223; then 2 MiB against
8: 181 and 167 against 188 and 191, stream lag no worse (docs/benchmarks.md). 2 MiB is the
default: one or two full snapshots of 10,000 executors at a time.

Streams wait their turn in order (first come, first served). A message larger than the whole
budget is sent when nothing else is, and small ones (deltas, removals: under `SMALL` bytes) never
wait: they are most of the traffic and cost nothing to hold.

A client that stops reading blocks its stream's send (gRPC's flow control), and with it the share
that stream holds. So that slow clients stall nobody, a share held longer than `HOLD_LIMIT` is
given back to the others while its send goes on (logged at DEBUG): the bound holds for
clients that read, and a few that do not cannot starve the rest.

Used only from the event loop's thread. A share is a plain (synchronous) context manager, so a
stream that ends while holding one (the client cancelled during the send) gives it back as its
generator is closed:

    for message in messages:
        with await budget.turn(message.size):
            yield message.join()  # held until gRPC has taken the message
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

logger = logging.getLogger(__name__)

SMALL = 64 * 1024
"""Messages below this many bytes never wait for the budget."""

HOLD_LIMIT = 1.0
"""Seconds a share may be held before it is given back to the others (a client not reading)."""


class Timer(Protocol):
    def cancel(self) -> None: ...


CallLater = Callable[[float, Callable[[], None]], Timer]
"""`loop.call_later` (the default), or a test's manual timer."""


class SendBudget:
    """First-come, first-served shares of `limit` bytes (see the module's docstring)."""

    def __init__(
        self,
        limit: int,
        *,
        small: int = SMALL,
        hold_limit: float = HOLD_LIMIT,
        call_later: CallLater | None = None,
    ) -> None:
        if limit <= 0:
            raise ValueError(f"the send budget must be positive, not {limit}")
        self._limit = limit
        self._small = small
        self._hold_limit = hold_limit
        self._call_later = call_later
        self._in_use = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._unresumed = 0
        """Waits granted whose streams have not run yet: a newcomer must not pass them."""

    @property
    def in_use(self) -> int:
        return self._in_use

    async def turn(self, size: int) -> Share:
        """A share of `size` bytes once it is this message's turn (at once for small ones)."""
        if not self.needs(size):
            return Share(self, 0)
        await self.acquire(size)
        share = Share(self, size)
        call_later = self._call_later or asyncio.get_running_loop().call_later
        share.timer = call_later(self._hold_limit, share.forgive)
        return share

    def needs(self, size: int) -> bool:
        """Whether a message of `size` bytes takes a share (small ones do not)."""
        return size >= self._small

    async def acquire(self, size: int) -> None:
        """Wait until `size` bytes fit (or nothing else is held), and take them."""
        if not self._waiting and not self._unresumed and self._fits(size):
            self._in_use += size
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((size, turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._unresumed -= 1
                self.release(size)  # granted just as the wait was cancelled: give it back
            else:
                self._forget(turn)
            raise
        self._unresumed -= 1
        self._grant()  # those queued behind it while it was being woken, if they fit

    def release(self, size: int) -> None:
        """Give `size` bytes back and let the waiting streams that now fit go, in order."""
        self._in_use -= size
        self._grant()

    def _fits(self, size: int) -> bool:
        return self._in_use == 0 or self._in_use + size <= self._limit

    def _grant(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            size, turn = self._waiting.popleft()
            if turn.cancelled():
                continue
            self._in_use += size
            self._unresumed += 1
            turn.set_result(None)

    def _forget(self, turn: asyncio.Future[None]) -> None:
        self._waiting = deque(entry for entry in self._waiting if entry[1] is not turn)
        self._grant()  # the one ahead may have been what held the others back


class Share:
    """Bytes taken from a `SendBudget`, given back when the `with` block ends, however it ends,
    or earlier by `forgive` (its send outlasted the hold limit)."""

    __slots__ = ("_budget", "_size", "timer")

    def __init__(self, budget: SendBudget, size: int) -> None:
        self._budget = budget
        self._size = size
        self.timer: Timer | None = None

    def forgive(self) -> None:
        """Give the bytes back while the send goes on (a client not reading holds it up)."""
        size, self._size = self._size, 0
        if size:
            logger.debug(
                "A stream's send of %d bytes outlasted the hold limit (a client reading slowly); "
                "its share goes back to the other streams.",
                size,
            )
            self._budget.release(size)

    def __enter__(self) -> Share:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.timer is not None:
            self.timer.cancel()
        size, self._size = self._size, 0  # once only
        if size:
            self._budget.release(size)
