"""The worker pipeline every ``MessagePreset`` shares: from an HTTP send to one record.

A send is checked in the order a real provider answers (credential 401, size 413, key and
body 400, the wire's own rules, scope 403), then faults are picked, the preset admits and
decides it, and a held send whose epoch ended meanwhile is refused in its own epoch. Every
path appends exactly one record before the reply leaves, and every refusal says why, in
the record and in the reply. One pipeline for all presets keeps those promises in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request

from fake_providers._attempt import Attempt, Recognised, recognise, request_payload_hash
from fake_providers._credentials import Credential
from fake_providers._epochs import request_epoch, stale_payload
from fake_providers._flights import Flights
from fake_providers._message_preset import Incoming, MessagePreset
from fake_providers._preset import Core, Preset
from fake_providers._records import FaultRule
from fake_providers._reply import Reply
from fake_providers._routing import MAX_BODY_BYTES


@dataclass(frozen=True)
class _Send:
    """One HTTP send as received and recognised, before any check."""

    preset: MessagePreset
    request: Request
    #: the body, None if it was larger than ``MAX_BODY_BYTES``
    raw: bytes | None
    recognised: Recognised

    @property
    def attempt(self) -> Attempt:
        return self.recognised.attempt


class MessagePipeline:
    """``ProviderApp.handle_message``: the steps of one send, each under the core's lock
    where it reads or changes what other requests see."""

    def __init__(self, core: Core, flights: Flights) -> None:
        self._core = core
        self._flights = flights

    def handle(self, preset: Preset, request: Request) -> Reply:
        """Recognise the send, screen it and admit it (one hold of the lock, so two sends
        with one key cannot both pass), then process it."""
        assert isinstance(preset, MessagePreset)
        raw = _read_body(request)
        send = _Send(preset, request, raw, recognise(preset, request, raw))
        credential = preset.authenticate(request, raw or b"")
        asked = request_epoch(request)
        with self._core.lock:
            incoming = self._screen(send, credential, asked)
            if isinstance(incoming, Reply):
                return incoming
            token = self._admit(preset, incoming)
            if isinstance(token, Reply):
                return token
        return self._process(preset, incoming, token)

    # -- screening (under the lock) -----------------------------------------------------

    def _screen(
        self, send: _Send, credential: Credential | str, asked: int | None
    ) -> Reply | Incoming:
        """The refusal the send gets (recorded), or the send handed to the preset's hooks."""
        attempt = send.attempt
        if asked is not None and asked != self._core.epoch:
            return self._stale_on_arrival(attempt, asked)
        if isinstance(credential, str):
            return self._refuse(send, "unauthenticated", 401, "unauthenticated", credential)
        attempt.credential_id = credential.credential_id
        malformed = self._malformed(send)
        if malformed is not None:
            return malformed
        body = dict(send.recognised.fields or {})
        attempt.payload_hash = request_payload_hash(send.request, send.recognised.seen, body)
        seen = send.recognised.seen
        incoming = Incoming(attempt, body, credential, send.request, seen=seen, text=seen.text)
        broken = send.preset.validate(incoming)
        if broken is not None:
            return self._refuse(send, "rejected", *broken)
        if not credential.allows(incoming.destination):
            return self._out_of_scope(send, incoming, credential)
        return incoming

    def _stale_on_arrival(self, attempt: Attempt, asked: int) -> Reply:
        """A worker of an epoch that is over: never counted in the current one."""
        current = self._core.epoch
        stale = stale_payload(asked, current)
        return self._core.record(
            attempt,
            outcome="stale_epoch",
            status=410,
            payload=stale,
            epoch=asked if asked < current else None,
            reason=stale["error"],
        )

    def _malformed(self, send: _Send) -> Reply | None:
        """The refusal of a body too large, a missing key or a body the wire cannot take."""
        preset = send.preset
        if send.raw is None:
            text = f"body larger than {MAX_BODY_BYTES} bytes"
            return self._refuse(send, "rejected", 413, text, text)
        if preset.key_required and send.attempt.idempotency_key is None:
            where = f"no {preset.key_header} header" if preset.key_header else "no key"
            return self._refuse(send, "rejected", 400, preset.missing_key_error, where)
        bad_body = preset.body_error(send.recognised.seen)
        if bad_body is not None:
            return self._refuse(send, "rejected", 400, bad_body, bad_body)
        return None

    def _out_of_scope(self, send: _Send, incoming: Incoming, credential: Credential) -> Reply:
        """The 403 of a destination outside the credential's scope, saying which and why."""
        attempt = send.attempt
        globs = ", ".join(credential.scope)
        said = repr(incoming.destination) if attempt.destination else "no destination"
        if attempt.destination is None:
            said += f" ({send.recognised.found.misses.get('destination', 'no rule')})"
        reason = f"destination out of scope: {said} is outside {globs}"
        return self._refuse(send, "refused", 403, "destination out of scope", reason)

    def _refuse(self, send: _Send, outcome: str, status: int, error: str, reason: str) -> Reply:
        """Record a refusal and answer it as the preset's wire words refusals."""
        code, payload = send.preset.refusal(send.request, status, error, reason)
        reply = self._core.record(
            send.attempt, outcome=outcome, status=code, payload=payload, reason=reason
        )
        return send.preset.refusal_reply(send.request, reply, reason)

    # -- admission (under the lock) -----------------------------------------------------

    def _admit(self, preset: MessagePreset, incoming: Incoming) -> Reply | int:
        """Pick the fault; a ``status`` fault or the preset's ``admit`` answers at once, else
        the send enters flight (``slow``: held until its due time) and its token is returned."""
        core, flights = self._core, self._flights
        fault = core.pick_fault([incoming.attempt.match_values()])
        if fault is not None and fault.fault == "status":
            return self._status_fault(preset, incoming, fault)
        incoming.fault = fault
        early = preset.admit(incoming)
        if early is not None:
            return _deliver(early, fault)
        slow = fault is not None and fault.fault == "slow"
        due = core.now() + (fault.delay_s or 0.0) if fault is not None and slow else None
        return flights.enter(incoming.attempt, "slow" if slow else "busy", due=due)

    def _status_fault(self, preset: MessagePreset, incoming: Incoming, fault: FaultRule) -> Reply:
        """An injected status: recorded as failed, the key unused, nothing processed."""
        assert fault.status is not None
        headers: dict[str, str] = {}
        key_header = preset.key_header
        if key_header and incoming.attempt.idempotency_key:
            headers[key_header] = incoming.attempt.idempotency_key
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
            incoming.attempt.retry_after = fault.retry_after
        payload = {"error": "injected fault", "status": fault.status}
        return self._core.record(
            incoming.attempt,
            outcome="failed_by_fault",
            status=fault.status,
            payload=payload,
            headers=headers,
            fault="status",
            reason=f"injected fault: status {fault.status} (not processed; the key is not used)",
        )

    # -- processing (in flight) ---------------------------------------------------------

    def _process(self, preset: MessagePreset, incoming: Incoming, token: int) -> Reply:
        """Hold a ``slow`` send, fence it by its epoch, let the preset decide, hold a
        ``timeout`` reply; the send leaves flight however this ends."""
        core, flights = self._core, self._flights
        fault = incoming.fault
        try:
            with core.lock:
                if fault is not None and fault.fault == "slow":
                    assert fault.delay_s is not None
                    flights.hold_slow(token, fault.delay_s)
                    flights.move(token, "busy")
                admitted_in = flights.epoch_of(token)
                if admitted_in != core.epoch:
                    # Its epoch ended while it was held (the drain gave up): refuse it in its
                    # own epoch; deciding it now would count it in the next case.
                    preset.release(incoming)
                    return self._stale_after_hold(incoming, admitted_in)
                try:
                    reply = preset.decide(incoming)
                finally:
                    preset.release(incoming)
                if fault is not None and fault.fault == "timeout":
                    flights.move(token, "held")
            if fault is not None and fault.fault == "timeout":
                assert fault.hold_s is not None
                flights.hold_reply(token, fault.hold_s)
            return _deliver(reply, fault)
        finally:
            with core.lock:
                flights.leave(token)

    def _stale_after_hold(self, incoming: Incoming, admitted_in: int) -> Reply:
        """A send admitted in an epoch that ended while it was held: refused in that epoch."""
        stale = stale_payload(admitted_in, self._core.epoch)
        return self._core.record(
            incoming.attempt,
            outcome="stale_epoch",
            status=410,
            payload=stale,
            fault=incoming.fault_name,
            epoch=admitted_in,
            reason=stale["error"],
        )


def _read_body(request: Request) -> bytes | None:
    """The request body, or None if it is larger than ``MAX_BODY_BYTES``."""
    try:
        return request.get_data(cache=False)
    except RequestEntityTooLarge:
        return None


def _deliver(reply: Reply, fault: FaultRule | None) -> Reply:
    """The reply, turned into a cut connection if the fault drops it."""
    if fault is not None and fault.drops:
        return reply._replace(drop=True)
    return reply
