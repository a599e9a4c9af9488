"""Far-side crash points: a reply held for ever once its effect is committed.

The harness asks for the reply to the K-th accepted effect of an epoch to be held
(``POST /_admin/hold``), waits until it is (``GET /_admin/held``) and kills the sender
while it waits: the effect is in the log, the worker never learnt it. Which request is
held is decided at the append that commits it; the thread that made that append holds its
reply, and notes when its sender went away so a sender that gave up on its own (its own
timeout) is told from one the kill took.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from wsgiref.types import WSGIEnvironment

from werkzeug.wrappers import Request

from fake_providers._epochs import stale_payload
from fake_providers._flights import MAX_WAIT_S
from fake_providers._reply import Reply, json_response

#: how often a held reply looks whether its sender is gone (a select on its socket)
HOLD_POLL_S: Final = 0.05


@dataclass
class _Hold:
    """A far-side crash point armed for one epoch: the ``nth`` accepted effect logged after
    arming has its reply held (``POST /_admin/hold``), never sent."""

    epoch: int
    nth: int
    #: accepted effects of ``epoch`` logged since the hold was armed
    counted: int = 0
    #: the log record whose reply is held (set once the ``nth`` one is logged)
    seq: int | None = None
    held_at: float | None = None
    #: True once the request is actually being held (its thread stopped before replying)
    holding: bool = False
    #: ``time.monotonic()`` (CLOCK_MONOTONIC: one clock for every process of the machine)
    #: when the held request's sender was seen to close its connection; compared with the
    #: harness's kill time, it tells a sender that gave up waiting on its own (its timeout)
    #: from one the kill took while it waited
    sender_gone_at: float | None = None


def _hold_json(hold: _Hold | None) -> dict[str, Any]:
    """What ``/_admin/held`` and ``DELETE /_admin/hold`` say of a hold (None: none armed)."""
    if hold is None:
        return {"armed": False, "holding": False, "epoch": None, "nth": None, "counted": 0}
    return {
        "armed": True,
        "holding": hold.holding,
        "epoch": hold.epoch,
        "nth": hold.nth,
        "counted": hold.counted,
        "seq": hold.seq,
        "sender_gone_at": hold.sender_gone_at,
    }


class Holds:
    """The one hold armed (or none), guarded by its own condition, and which thread holds.

    ``current_epoch`` reads the core's epoch under its lock; ``closing`` is set when the
    server closes (every hold then lets go).
    """

    def __init__(self, closing: threading.Event, current_epoch: Callable[[], int]) -> None:
        self._closing = closing
        self._current_epoch = current_epoch
        self._hold: _Hold | None = None
        self._changed = threading.Condition(threading.Lock())
        #: set on the thread whose append reached the hold: that thread holds its reply
        self._here = threading.local()

    def count(self, epoch: int, seq: int) -> None:
        """An accepted effect was just committed to the log: count it against the armed
        hold; the one that makes ``nth`` marks this thread to hold its reply."""
        with self._changed:
            hold = self._hold
            if hold is None or hold.epoch != epoch or hold.seq is not None:
                return
            hold.counted += 1
            if hold.counted == hold.nth:
                hold.seq = seq
                self._here.hold = hold

    def claim(self) -> bool:
        """Whether this thread's request reached the armed hold (its effect is committed):
        then its caller holds the reply and never sends it. Takes the mark off the thread."""
        hold = getattr(self._here, "hold", None)
        self._here.hold = None
        self._here.claimed = hold  # this thread's held request, for hold_http
        if hold is None:
            return False
        with self._changed:
            hold.holding = True
            hold.held_at = time.monotonic()
            self._changed.notify_all()
        return True

    def hold_http(self, environ: WSGIEnvironment, over: Callable[[], bool]) -> None:
        """Hold the HTTP reply this thread claimed: wait until the client has gone (it was
        killed: its socket closed) or ``over()`` (the server closes or the epoch is over),
        then return (the caller cuts the connection). When the client goes, the hold notes
        when (``sender_gone_at``)."""
        hold: _Hold | None = getattr(self._here, "claimed", None)
        sock = environ.get("werkzeug.socket")
        while not over():
            if not isinstance(sock, socket.socket):
                self._closing.wait(HOLD_POLL_S)
                continue
            ready, _, _ = select.select([sock], [], [], HOLD_POLL_S)
            if not ready:
                continue
            try:
                peeked = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                return self._sender_gone(hold)  # reset by the peer: the sender is gone
            if not peeked:
                return self._sender_gone(hold)  # end of stream: the sender is gone
            self._closing.wait(HOLD_POLL_S)  # it sent more (pipelining): it is still there

    def _sender_gone(self, hold: _Hold | None) -> None:
        if hold is not None:
            with self._changed:
                if hold.sender_gone_at is None:
                    hold.sender_gone_at = time.monotonic()
                self._changed.notify_all()

    # -- admin API ----------------------------------------------------------------------

    def arm(self, request: Request) -> Reply:
        """POST /_admin/hold ``{"epoch": N, "nth": K}``: hold the reply to the K-th request of
        epoch N (the current one) whose effect is accepted and committed from now on. Only
        accepted effects count (``fresh``, ``expired_then_accepted``): refused, rejected,
        deduplicated or faulted requests, lookups and admin calls do not. Replaces any hold."""
        data = request.get_json(silent=True)
        shape = 'expected {"epoch": N, "nth": K} with integers N >= 1, K >= 1'
        if not isinstance(data, dict) or set(data) != {"epoch", "nth"}:
            return Reply(json_response(400, {"error": shape}))
        epoch, nth = data["epoch"], data["nth"]
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (epoch, nth)):
            return Reply(json_response(400, {"error": shape}))
        current = self._current_epoch()
        if epoch != current:
            return Reply(json_response(409, stale_payload(epoch, current)))
        with self._changed:
            self._hold = _Hold(epoch=epoch, nth=nth)
            self._changed.notify_all()
        return Reply(json_response(200, {"epoch": epoch, "nth": nth}))

    def disarm(self, _request: Request) -> Reply:
        """DELETE /_admin/hold: no further request is held. A reply already held stays held
        (never sent) until its sender is gone or its epoch is over."""
        with self._changed:
            hold, self._hold = self._hold, None
            self._changed.notify_all()
        return Reply(json_response(200, _hold_json(hold)))

    def held(self, request: Request) -> Reply:
        """GET /_admin/held?epoch=N&timeout_s=T: wait (server side, no polling) until the
        hold armed for epoch N holds a reply, is disarmed or replaced, or T seconds pass;
        say which (``holding`` true: the request's effect is committed and it gets no
        reply)."""
        try:
            epoch = int(request.args.get("epoch", ""))
            timeout_s = min(float(request.args.get("timeout_s", "0")), MAX_WAIT_S)
        except ValueError:
            return Reply(
                json_response(400, {"error": "epoch must be an integer, timeout_s a number"})
            )
        with self._changed:
            armed = self._hold
            if armed is None or armed.epoch != epoch:
                return Reply(json_response(200, _hold_json(None)))
            self._changed.wait_for(
                lambda: armed.holding or self._hold is not armed or self._closing.is_set(),
                timeout=max(timeout_s, 0.0),
            )
            return Reply(json_response(200, _hold_json(armed)))
