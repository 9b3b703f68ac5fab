"""Answers the server could not record for now (a result or outcome acked `unavailable`:
its database lost a connection or is down) are sent again after a pause: RESEND_MIN
seconds, doubling per resend to RESEND_MAX while refusals go on, back to the minimum after
a clean ack. Dropping them left the job or step running until its lease ran out, then ran
it again (docs/protocol.md). Shared by the job and workflow workers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

RESEND_MIN = 0.1
RESEND_MAX = 5.0

K = TypeVar("K")


class Resends(Generic[K]):
    """The refused keys of one worker and the timer that hands them back to it. The worker
    keeps the refused answers unacked (a new stream resends them anyway: `cancel()` then)
    and moves them to its writer when `fire` gets their keys."""

    def __init__(self, fire: Callable[[set[K]], None]) -> None:
        self._fire = fire
        self._keys: set[K] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._pause = RESEND_MIN

    def refuse(self, key: K) -> None:
        """`key` was refused as unavailable: resend it with the others at the next timer."""
        self._keys.add(key)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._pause, self._due)
            self._pause = min(self._pause * 2, RESEND_MAX)

    def recorded(self) -> None:
        """A clean ack: the next refusal waits the shortest pause again."""
        self._pause = RESEND_MIN

    def cancel(self) -> None:
        """Forgets the refused keys (a reconnect resends every unacked answer; shutdown)."""
        self._keys.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        self._timer = None
        keys, self._keys = self._keys, set()
        self._fire(keys)
