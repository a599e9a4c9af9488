"""The shared core every preset plugs into, assembled from its rooms.

A preset (``fake_providers/presets/<name>.py``) is a small module: the provider semantics
(dedupe window, lookup, rendered surface) and nothing else. The core owns everything that
must behave the same for all of them:

- every worker request that reaches a handler is appended to the effect log and committed
  *before* the reply is produced, so what the log says the provider saw is never less than
  what any client was told;
- decisions (look up the key, then append) run under one lock, so two concurrent requests
  with the same key cannot both be accepted;
- credentials (401), destination scopes (403, logged ``refused``), fault rules (picked and
  counted in one place, applied the same way by every preset), the provider clock, and the
  admin API (``/_admin/*``);
- epochs: a worker URL may start with ``/epoch/<N>`` (the harness hands each case's workers
  such a base URL). A request of an epoch that is over is refused with 410 and, if it is a
  send, logged ``stale_epoch`` in *its own* epoch, never in the current one; a send admitted
  in epoch N and still held when N ends is decided in N or refused, never counted in N+1.
  ``POST /_admin/drain`` waits until every request of an epoch has been answered or dropped.

HTTP presets that take the worker's JSON message (``POST /v1/messages`` with destination,
run_id, delivery_id, body and optionally recognizer) derive from ``MessagePreset`` and fill
in a few hooks; the SMTP preset derives from ``Preset`` and runs its own listener, using the
same log, lock, faults and clock.

This module wires the rooms together (``fake_providers/__init__.py`` lists them) and serves
the services a preset calls (``Core`` in ``fake_providers._preset``): the log, the lock,
the clock, faults, flights and holds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from wsgiref.types import StartResponse, WSGIEnvironment

from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Request

from fake_providers import _bearer
from fake_providers._admin import AdminApi
from fake_providers._attempt import Attempt
from fake_providers._clock import FileClock
from fake_providers._credentials import Credential
from fake_providers._effect_log import EffectLog
from fake_providers._epochs import take_epoch_prefix
from fake_providers._faults import Faults
from fake_providers._flights import Flights
from fake_providers._holds import Holds
from fake_providers._message import MessagePipeline
from fake_providers._mint import IdMint
from fake_providers._preset import PresetSpec
from fake_providers._provider_clock import ProviderClock
from fake_providers._records import ACCEPTED_OUTCOMES, FaultRule
from fake_providers._reply import Reply, json_response, raw_json
from fake_providers._routing import Handler, Router, SizedRequest, error_reply, is_worker_path, send


class ProviderApp:
    """A fake provider: one preset, one effect log, fixed credentials, mutable faults."""

    def __init__(
        self,
        *,
        spec: PresetSpec,
        log: EffectLog,
        credentials: Mapping[str, Credential],
        admin_token: str,
        options: Mapping[str, object] | None = None,
        clock: Callable[[], float] = time.time,
        browse_open: bool = False,
    ) -> None:
        self.spec = spec
        #: serve ``/_browse`` without the admin token (the runner allows it on loopback only)
        self.browse_open = browse_open
        self.options = spec.resolve(options)
        self.log = log
        self.credentials = dict(credentials)
        self.lock = threading.Lock()
        self._closing = threading.Event()
        self._epoch = log.current_epoch()
        offset = log.clock_offset()
        path = log.epoch_clock_path(self._epoch)
        #: the provider clock (``clock`` is the wall clock under it)
        self.clock = ProviderClock(clock, offset, None if path is None else FileClock(path))
        self.faults = Faults()
        self.flights = Flights(self.lock, self._closing, lambda: self._epoch, self.now)
        #: the far-side crash point (``/_admin/hold``)
        self.holds = Holds(self._closing, self.current_epoch)
        # a restarted provider never re-mints an earlier id
        self._mint = IdMint(log.size(), lambda: self._epoch)
        self._messages = MessagePipeline(self, self.flights)
        self.preset = spec.factory(self, self.options)
        admin = AdminApi(self, admin_token)
        self._router = Router([*self.preset.routes(), *admin.routes()])

    def start(self, host: str) -> dict[str, Any]:
        """Start the preset's extra listeners on ``host``; return extra ready-line fields."""
        return self.preset.start(host)

    def close(self) -> None:
        """Release held replies and stop the preset's listeners."""
        self._closing.set()
        with self.lock:
            self.flights.changed.notify_all()  # replies held on it (``hold_reply``) go now
        self.preset.stop()

    # -- WSGI ---------------------------------------------------------------------------

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Route, handle (logging first), then reply, or cut the connection for a drop."""
        stale = take_epoch_prefix(environ, self.current_epoch)
        request = SizedRequest(environ)
        try:
            handler = self._router.match(environ)
            reply = self._serve(handler, request, environ, stale)
        except HTTPException as exc:
            reply = error_reply(exc)
        return send(reply, environ, start_response)

    def _serve(
        self,
        handler: Handler,
        request: Request,
        environ: WSGIEnvironment,
        stale: dict[str, Any] | None,
    ) -> Reply:
        """A worker route of an ended epoch is refused (a send is logged by the pipeline
        instead); one of the current epoch waits for due ``slow`` sends first, and its
        reply is held, never sent, if it reached the armed hold."""
        worker_route = is_worker_path(environ)
        if stale is not None and worker_route and handler != self.handle_message:
            return Reply(json_response(410, stale))
        if worker_route:
            self.flights.settle_due()
        reply = handler(request)
        if worker_route and self.claim_hold():
            epoch = self._epoch
            self.holds.hold_http(environ, lambda: self.hold_over(epoch))
            reply = Reply(json_response(503, {"error": "held"}), drop=True)
        return reply

    # -- the epoch ----------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The current epoch (read it under ``lock`` when it must not move)."""
        return self._epoch

    def current_epoch(self) -> int:
        """The current epoch, read under ``lock``."""
        with self.lock:
            return self._epoch

    def begin_epoch(
        self, rules: Sequence[FaultRule], clock: FileClock | None, clock_path: str | None
    ) -> int:
        """A new epoch: its clock follows ``clock`` (None: wall clock plus the recorded
        advances), ``rules`` are armed, ids count afresh; held requests of the old epoch
        look again (and are refused in it). Returns the new epoch."""
        with self.lock:
            self.clock.follow(clock)
            self._epoch = self.log.new_epoch(started_at=self.now(), clock_path=clock_path)
            self._mint.forget()
            self.faults.arm(rules)
            epoch = self._epoch
            self.flights.changed.notify_all()  # held requests of the old epoch look again
        return epoch

    # -- services for presets -----------------------------------------------------------

    def now(self) -> float:
        """The provider clock: the followed clock file's reading if the epoch has one, else
        wall clock plus every advance recorded in the log."""
        return self.clock.now()

    @property
    def follows_clock_file(self) -> bool:
        """True while the current epoch's clock is a file someone else moves."""
        return self.clock.file is not None

    def mint_id(self, attempt: Attempt, prefix: str, nbytes: int = 8) -> str:
        """A provider-side id (message, delivery, order) for ``attempt`` (``IdMint``)."""
        return self._mint.mint(attempt, prefix, nbytes)

    def pause(self, seconds: float) -> None:
        """Hold the calling thread (a slow or held reply); returns early when closing."""
        self._closing.wait(seconds)

    def bearer_credential(self, request: Request) -> Credential | None:
        """The credential whose secret is the request's bearer token, if any."""
        return _bearer.bearer_credential(self.credentials, request)

    def bearer_or_reason(self, request: Request) -> Credential | str:
        """The bearer token's credential, or why there is none (never showing a secret)."""
        return _bearer.bearer_or_reason(self.credentials, request)

    def append(
        self,
        attempt: Attempt,
        *,
        outcome: str,
        status: int | None,
        fault: str | None = None,
        provider_message_id: str | None = None,
        response_body: str | None = None,
        content: str | None = None,
        received_at: float | None = None,
        epoch: int | None = None,
        reason: str | None = None,
    ) -> None:
        """Append one record for ``attempt`` to the log (committed before returning), in
        ``epoch`` (default: the current one). ``reason`` (why it was refused or failed)
        replaces the attempt's own (``unattributed: ...``) when given."""
        if reason is not None:
            attempt.reason = reason
        written = self.log.append(
            epoch=self._epoch if epoch is None else epoch,
            received_at=self.now() if received_at is None else received_at,
            outcome=outcome,
            status_code=status,
            fault=fault,
            provider_message_id=provider_message_id,
            response_body=response_body,
            content=content,
            request=attempt.sent,
            **attempt.log_fields(),
        )
        if outcome in ACCEPTED_OUTCOMES:
            self.holds.count(written.epoch, written.seq)

    def record(
        self,
        attempt: Attempt,
        *,
        outcome: str,
        status: int,
        payload: Mapping[str, Any] | str,
        headers: Mapping[str, str] | None = None,
        fault: str | None = None,
        provider_message_id: str | None = None,
        save: bool = False,
        content: str | None = None,
        epoch: int | None = None,
        reason: str | None = None,
    ) -> Reply:
        """Append the attempt to the log (committed), then build the JSON reply.

        ``save`` stores the reply in the record so a later request can replay it exactly.
        ``reason`` says why a request was refused or failed: it goes into the record and,
        when the payload is a JSON object without one, into the reply as ``"reason"``.
        """
        if reason is not None and isinstance(payload, Mapping) and "reason" not in payload:
            payload = {**payload, "reason": reason}
        body = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
        self.append(
            attempt,
            outcome=outcome,
            status=status,
            fault=fault,
            provider_message_id=provider_message_id,
            response_body=body if save else None,
            content=content,
            epoch=epoch,
            reason=reason,
        )
        return Reply(raw_json(status, body, headers))

    def pick_fault(self, candidates: Sequence[Mapping[str, str | None]]) -> FaultRule | None:
        """Count one request against every rule it matches; return the first that fires
        (``Faults.pick``). Caller holds ``lock``."""
        return self.faults.pick(candidates)

    def enter_flight(self, attempt: Attempt, stage: str, *, due: float | None = None) -> int:
        """Register a request as in flight (caller holds ``lock``); returns its token."""
        return self.flights.enter(attempt, stage, due=due)

    def flight_stage(self, token: int, stage: str) -> None:
        """Move an in-flight request to another stage (caller holds ``lock``)."""
        self.flights.move(token, stage)

    def flight_epoch(self, token: int) -> int:
        """The epoch a request was admitted in (caller holds ``lock``)."""
        return self.flights.epoch_of(token)

    def leave_flight(self, token: int) -> None:
        """The request has been answered (caller holds ``lock``)."""
        self.flights.leave(token)

    def claim_hold(self) -> bool:
        """Whether this thread's request reached the armed hold (its effect is committed):
        then its caller holds the reply and never sends it. Takes the mark off the thread."""
        return self.holds.claim()

    def hold_over(self, epoch: int) -> bool:
        """Whether a held reply of ``epoch`` may stop waiting: the server is closing or the
        epoch is over (the harness moved on); its connection is then cut, never answered."""
        return self._closing.is_set() or self._epoch != epoch

    def handle_message(self, request: Request) -> Reply:
        """A worker send on any of the preset's wire routes: credential (401), size (413),
        key and body (400), the wire's own rules, scope (403), then faults and the preset's
        decision. Every path appends exactly one record, and every refusal says why, in the
        record and in the reply. Who the delivery is for is read by the preset's
        ``Identify`` rule; a request it cannot attribute is still processed as the real
        provider would, and its record says ``unattributed: ...``."""
        return self._messages.handle(self.preset, request)
