"""The worker requests between admission and reply, and every wait that depends on them.

A ``slow`` request held before it is decided, a ``timeout`` reply held after, a reader
that must not overtake a request already due, and the harness waiting until an epoch has
no request left (``/_admin/drain``) or has enough of them (``/_admin/in_flight``): all
of these wait on one condition, notified whenever a request enters, moves or leaves, so
nothing here polls except on a clock file that someone else moves.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from werkzeug.wrappers import Request

from fake_providers._attempt import Attempt
from fake_providers._reply import Reply, json_response

#: how often a ``slow`` request held on a followed clock file looks at the file again
CLOCK_POLL_S: Final = 0.01
#: how long a worker request waits for ``slow`` holds that are already due to be decided
DUE_HOLDS_WAIT_S: Final = 5.0
#: the longest an admin call waits server side
MAX_WAIT_S: Final = 30.0


@dataclass
class _Flight:
    """A worker request between admission and its reply (for ``/_admin/in_flight``)."""

    attempt: Attempt
    stage: str
    since: float
    epoch: int
    #: provider-clock time a ``slow`` hold ends (it also ends after its delay in wall time)
    due: float | None = None
    #: a drain that was told every sender had gone cut this request's reply hold short
    reply_cut: bool = False

    def to_json(self) -> dict[str, Any]:
        """The request as ``/_admin/in_flight`` and ``/_admin/drain`` list it."""
        age_s = time.monotonic() - self.since
        return {**self.attempt.log_fields(), "stage": self.stage, "age_s": age_s}


class Flights:
    """The requests in flight, keyed by the token ``enter`` gave them.

    ``changed`` is a condition on the core's lock: the methods noted "caller holds the
    lock" run under it; the others take it themselves.
    """

    def __init__(
        self,
        lock: threading.Lock,
        closing: threading.Event,
        epoch: Callable[[], int],
        now: Callable[[], float],
    ) -> None:
        self.changed = threading.Condition(lock)
        self._closing = closing
        self._epoch = epoch
        self._now = now
        self._flights: dict[int, _Flight] = {}
        self._next = 0

    def enter(self, attempt: Attempt, stage: str, *, due: float | None = None) -> int:
        """Register a request as in flight (caller holds the lock); returns its token."""
        self._next += 1
        self._flights[self._next] = _Flight(attempt, stage, time.monotonic(), self._epoch(), due)
        self.changed.notify_all()
        return self._next

    def move(self, token: int, stage: str) -> None:
        """Move an in-flight request to another stage (caller holds the lock)."""
        flight = self._flights.get(token)
        if flight is not None:
            flight.stage = stage
            self.changed.notify_all()

    def epoch_of(self, token: int) -> int:
        """The epoch a request was admitted in (caller holds the lock)."""
        flight = self._flights.get(token)
        return self._epoch() if flight is None else flight.epoch

    def leave(self, token: int) -> None:
        """The request has been answered (caller holds the lock)."""
        self._flights.pop(token, None)
        self.changed.notify_all()

    def hold_slow(self, token: int, delay_s: float) -> None:
        """Hold a ``slow`` request (caller holds the lock; returns holding it again) until
        ``delay_s`` wall seconds have passed or the provider clock has reached the flight's
        due time, whichever comes first, or the server closes.

        On a followed clock file, time moves when the harness or a worker moves it, so a
        jump past the due time ends the hold at once, as the same wait would in production.
        """
        flight = self._flights.get(token)
        due = None if flight is None else flight.due
        deadline = time.monotonic() + delay_s
        while not self._closing.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or (due is not None and self._now() >= due):
                return
            self.changed.wait(timeout=min(left, CLOCK_POLL_S))

    def hold_reply(self, token: int, hold_s: float) -> None:
        """Hold a processed request's reply (a ``timeout`` fault) ``hold_s`` wall seconds, or
        until the server closes or a drain cuts it (``/_admin/drain`` with ``senders_gone``).

        The effect is in the log already: only the sender can tell when the reply goes, and
        a drain that says every sender has gone (the harness drains once its workers have
        ended) leaves nobody to tell, so the rest of the hold would only delay the next case.
        """
        until = time.monotonic() + hold_s
        with self.changed:
            while self._keeps_reply(token, until):
                self.changed.wait(timeout=until - time.monotonic())

    def _keeps_reply(self, token: int, until: float) -> bool:
        """Whether a reply held until ``until`` (monotonic) is still held: not once the
        server closes, the drain cut it (``hold_reply``) or the time is up."""
        flight = self._flights.get(token)
        return (
            not self._closing.is_set()
            and flight is not None
            and not flight.reply_cut
            and time.monotonic() < until
        )

    def settle_due(self) -> None:
        """Before serving a worker request, let every ``slow`` request whose hold is over on
        the provider clock be decided first: a reader never sees a world in which a request
        that was due has not landed yet, however fast the clock was moved."""
        with self.changed:
            self.changed.notify_all()  # held requests look at the clock again
            self.changed.wait_for(
                lambda: (
                    not any(
                        f.stage == "slow" and f.due is not None and f.due <= self._now()
                        for f in self._flights.values()
                    )
                ),
                timeout=DUE_HOLDS_WAIT_S,
            )

    def _of_epoch(self, epoch: int) -> list[_Flight]:
        return [f for f in self._flights.values() if f.epoch == epoch]

    # -- admin API ----------------------------------------------------------------------

    def in_flight(self, request: Request) -> Reply:
        """GET /_admin/in_flight?min=N&timeout_s=T: wait (server side, no polling) until at
        least N worker requests of the current epoch are between admission and reply, then
        list them. Requests admitted before the last reset are not counted."""
        try:
            wanted = int(request.args.get("min", "0"))
            timeout_s = min(float(request.args.get("timeout_s", "0")), MAX_WAIT_S)
        except ValueError:
            return Reply(
                json_response(400, {"error": "min must be an integer, timeout_s a number"})
            )
        with self.changed:
            reached = self.changed.wait_for(
                lambda: len(self._of_epoch(self._epoch())) >= wanted,
                timeout=max(timeout_s, 0.0),
            )
            flights = [f.to_json() for f in self._of_epoch(self._epoch())]
        return Reply(json_response(200, {"reached": reached, "in_flight": flights}))

    def drain(self, request: Request) -> Reply:
        """POST /_admin/drain ``{"epoch": N, "timeout_s": T}``: wait (server side, at most
        T seconds, no polling) until no worker request admitted in epoch N (default: the
        current one) is between admission and reply. ``drained`` false means it gave up; the
        requests still in flight are listed (they can no longer be counted in a later epoch:
        a held send whose epoch is over is refused when its hold ends).

        ``"senders_gone": true`` says no sender of the epoch is left (the harness's workers
        have all ended): the reply holds of its processed requests (``timeout`` faults, effect
        already logged) are cut short rather than waited out; what the log holds is the same,
        only sooner. A request held *before* processing (``slow``) is still waited for: its
        effect lands when its hold ends."""
        asked = _drain_args(request)
        if isinstance(asked, Reply):
            return asked
        epoch, timeout_s, senders_gone = asked
        started = time.monotonic()
        with self.changed:
            wanted = self._epoch() if epoch is None else epoch
            waited_for = len(self._of_epoch(wanted))
            if senders_gone:
                for flight in self._of_epoch(wanted):
                    flight.reply_cut = True
                self.changed.notify_all()
            drained = self.changed.wait_for(
                lambda: not self._of_epoch(wanted),
                timeout=min(max(float(timeout_s), 0.0), MAX_WAIT_S),
            )
            left = [f.to_json() for f in self._of_epoch(wanted)]
        return Reply(
            json_response(
                200,
                {
                    "epoch": wanted,
                    "drained": drained,
                    "waited_for": waited_for,
                    "waited_s": round(time.monotonic() - started, 4),
                    "in_flight": left,
                },
            )
        )


def _drain_args(request: Request) -> tuple[int | None, float, bool] | Reply:
    """A drain's ``epoch`` (None: the current one), ``timeout_s`` and ``senders_gone``, or
    the 400 its body gets."""
    data = request.get_json(silent=True) if request.content_length else {}
    if not isinstance(data, dict):
        return Reply(json_response(400, {"error": 'expected {"epoch": N, "timeout_s": T}'}))
    epoch, timeout_s = data.get("epoch"), data.get("timeout_s", 10.0)
    senders_gone = data.get("senders_gone", False)
    if (
        (epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)))
        or (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not math.isfinite(timeout_s)
        )
        or not isinstance(senders_gone, bool)
    ):
        return Reply(
            json_response(
                400,
                {"error": "epoch must be an integer, timeout_s a number, senders_gone a boolean"},
            )
        )
    return epoch, timeout_s, senders_gone
