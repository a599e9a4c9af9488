"""The WSGI app: the provider's HTTP contract (worker API and admin API) on top of the log.

Every worker request that reaches a handler is appended to the effect log and committed
*before* the reply is produced, so what the log says the provider saw is never less than
what any client was told. Idempotency decisions (look up the key, then append) run under
one lock so two concurrent requests with the same key cannot both be accepted.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Final, NamedTuple
from wsgiref.types import StartResponse, WSGIEnvironment

from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from fake_providers._credentials import Credential, find_credential, token_matches
from fake_providers._effect_log import FILTER_COLUMNS, EffectLog
from fake_providers._errors import ProviderError
from fake_providers._presets import Preset
from fake_providers._records import FaultRule

REQUIRED_FIELDS: Final = ("destination", "run_id", "delivery_id", "body", "recognizer")
MAX_BODY_BYTES: Final = 1 << 20


class _Request(Request):
    max_content_length = MAX_BODY_BYTES


class _Reply(NamedTuple):
    response: Response
    drop: bool = False  # cut the connection instead of sending ``response``


@dataclass
class _Armed:
    """A fault rule plus how many requests have matched it in this epoch."""

    rule: FaultRule
    matched: int = 0


@dataclass
class _Attempt:
    """What is known about one worker request so far; becomes one log record."""

    credential_id: str | None = None
    destination: str | None = None
    run_id: str | None = None
    delivery_id: str | None = None
    idempotency_key: str | None = None
    payload_hash: str | None = None
    recognizer: str | None = None


def _json(
    status: int, payload: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> Response:
    return _raw_json(status, json.dumps(payload, separators=(",", ":")), headers)


def _raw_json(status: int, body: str, headers: Mapping[str, str] | None = None) -> Response:
    return Response(body, status=status, headers=dict(headers or {}), mimetype="application/json")


def payload_hash(body: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON body (sorted keys, compact, UTF-8)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _bearer(request: Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _parse_message(raw: bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Return (body, error payload). ``body`` is set whenever the JSON is an object."""
    try:
        body = json.loads(raw) if raw else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None, {"error": "body is not valid JSON"}
    if not isinstance(body, dict):
        return None, {"error": "body must be a JSON object"}
    for name in REQUIRED_FIELDS:
        if name not in body:
            return body, {"error": f"missing field: {name}", "field": name}
        if not isinstance(body[name], str):
            return body, {"error": f"field {name} must be a string", "field": name}
    return body, None


class ProviderApp:
    """A fake provider: one preset, one effect log, fixed credentials, mutable faults."""

    def __init__(
        self,
        *,
        preset: Preset,
        log: EffectLog,
        credentials: Mapping[str, Credential],
        admin_token: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.preset = preset
        self._log = log
        self._credentials = dict(credentials)
        self._admin_token = admin_token
        self._clock = clock
        self._lock = threading.Lock()
        self._epoch = log.current_epoch()
        self._clock_offset = log.clock_offset()
        self._faults: list[_Armed] = []
        self._url_map = Map(
            [
                Rule("/v1/messages", methods=["POST"], endpoint="create_message"),
                Rule("/v1/messages", methods=["GET"], endpoint="lookup_message"),
                Rule("/_admin/health", methods=["GET"], endpoint="health"),
                Rule("/_admin/effects", methods=["GET"], endpoint="effects"),
                Rule("/_admin/reset", methods=["POST"], endpoint="reset"),
                Rule("/_admin/faults", methods=["POST"], endpoint="set_faults"),
                Rule("/_admin/faults", methods=["DELETE"], endpoint="clear_faults"),
                Rule("/_admin/clock", methods=["POST"], endpoint="clock"),
            ]
        )
        self._handlers: dict[str, Callable[[Request], _Reply]] = {
            "create_message": self._create_message,
            "lookup_message": self._lookup_message,
            "health": self._health,
            "effects": self._admin(self._effects),
            "reset": self._admin(self._reset),
            "set_faults": self._admin(self._set_faults),
            "clear_faults": self._admin(self._clear_faults),
            "clock": self._admin(self._advance_clock),
        }

    # -- WSGI ---------------------------------------------------------------------------

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Route, handle (logging first), then reply, or cut the connection for a drop."""
        request = _Request(environ)
        try:
            endpoint, _args = self._url_map.bind_to_environ(environ).match()
            reply = self._handlers[str(endpoint)](request)
        except HTTPException as exc:
            code = exc.code or 500
            reply = _Reply(_json(code, {"error": exc.name.lower()}))
        if reply.drop:
            sock = environ.get("werkzeug.socket")
            if not isinstance(sock, socket.socket):
                return _json(500, {"error": "accept_then_drop needs the werkzeug server"})(
                    environ, start_response
                )
            # The effect is already committed. Cut both directions so the client sees the
            # connection close with no response at all; werkzeug's write then fails with
            # BrokenPipeError, which it treats as a dropped connection (no traceback).
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return reply.response(environ, start_response)

    def now(self) -> float:
        """The provider clock: wall clock plus every advance recorded in the log."""
        return self._clock() + self._clock_offset

    # -- worker API ---------------------------------------------------------------------

    def _authenticate(self, request: Request) -> Credential | None:
        token = _bearer(request)
        return None if token is None else find_credential(self._credentials, token)

    def _record(
        self,
        attempt: _Attempt,
        *,
        outcome: str,
        status: int,
        payload: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        fault: str | None = None,
        drop: bool = False,
    ) -> _Reply:
        """Append the attempt to the log (committed), then build the reply."""
        body = json.dumps(payload, separators=(",", ":"))
        self._log.append(
            epoch=self._epoch,
            received_at=self.now(),
            outcome=outcome,
            status_code=status,
            fault=fault,
            **vars(attempt),
        )
        return _Reply(_raw_json(status, body, headers), drop)

    def _create_message(self, request: Request) -> _Reply:
        """POST /v1/messages: credential (401), key and body (400/413), scope (403), then
        faults and idempotency in ``_decide``. Every path appends exactly one record."""
        attempt = _Attempt(idempotency_key=request.headers.get("Idempotency-Key") or None)
        try:
            raw = request.get_data(cache=False)
        except RequestEntityTooLarge:
            raw = None
        body, error = (None, None) if raw is None else _parse_message(raw)
        if body is not None:
            for name in ("destination", "run_id", "delivery_id", "recognizer"):
                value = body.get(name)
                if isinstance(value, str):
                    setattr(attempt, name, value)
        credential = self._authenticate(request)
        with self._lock:
            if credential is None:
                payload = {"error": "unauthenticated"}
                return self._record(attempt, outcome="unauthenticated", status=401, payload=payload)
            attempt.credential_id = credential.credential_id
            if raw is None:
                payload = {"error": f"body larger than {MAX_BODY_BYTES} bytes"}
                return self._record(attempt, outcome="rejected", status=413, payload=payload)
            if attempt.idempotency_key is None:
                payload = {"error": "missing idempotency key"}
                return self._record(attempt, outcome="rejected", status=400, payload=payload)
            if error is not None or body is None:
                payload = error or {"error": "body must be a JSON object"}
                return self._record(attempt, outcome="rejected", status=400, payload=payload)
            attempt.payload_hash = payload_hash(body)
            if not credential.allows(body["destination"]):
                payload = {"error": "destination out of scope"}
                return self._record(attempt, outcome="refused", status=403, payload=payload)
            return self._decide(attempt, body["destination"])

    def _decide(self, attempt: _Attempt, destination: str) -> _Reply:
        """Faults, then Stripe-like idempotency. Caller holds ``self._lock``."""
        assert attempt.credential_id is not None
        assert attempt.idempotency_key is not None
        fault = self._pick_fault(attempt)
        echo = {"Idempotency-Key": attempt.idempotency_key}
        if fault is not None and fault.fault == "status":
            assert fault.status is not None
            headers = dict(echo)
            if fault.retry_after is not None:
                headers["Retry-After"] = str(fault.retry_after)
            payload = {"error": "injected fault", "status": fault.status}
            return self._record(
                attempt,
                outcome="failed_by_fault",
                status=fault.status,
                payload=payload,
                headers=headers,
                fault="status",
            )
        drop = fault is not None  # accept_then_drop: process normally, then cut the line
        fault_name = fault.fault if fault is not None else None
        now = self.now()
        prior = self._log.find_acceptance(
            epoch=self._epoch,
            credential_id=attempt.credential_id,
            idempotency_key=attempt.idempotency_key,
        )
        if prior is not None and now - prior.effect.received_at < self.preset.window_s:
            original = prior.effect
            if original.payload_hash != attempt.payload_hash:
                payload = {"error": "idempotency key reused with different parameters"}
                return self._record(
                    attempt,
                    outcome="rejected",
                    status=422,
                    payload=payload,
                    headers=echo,
                    fault=fault_name,
                    drop=drop,
                )
            self._log.append(
                epoch=self._epoch,
                received_at=now,
                outcome="deduplicated",
                status_code=original.status_code,
                provider_message_id=original.provider_message_id,
                fault=fault_name,
                **vars(attempt),
            )
            headers = {**echo, "Idempotent-Replayed": "true"}
            status = original.status_code or 200
            return _Reply(_raw_json(status, prior.response_body, headers), drop)
        message_id = "msg_" + secrets.token_hex(8)
        body = json.dumps(
            {"id": message_id, "status": "accepted", "destination": destination},
            separators=(",", ":"),
        )
        self._log.append(
            epoch=self._epoch,
            received_at=now,
            outcome="fresh" if prior is None else "expired_then_accepted",
            status_code=200,
            provider_message_id=message_id,
            fault=fault_name,
            response_body=body,
            **vars(attempt),
        )
        return _Reply(_raw_json(200, body, echo), drop)

    def _pick_fault(self, attempt: _Attempt) -> FaultRule | None:
        """Count this request against every matching rule; return the first that applies."""
        values = {
            "destination": attempt.destination,
            "run_id": attempt.run_id,
            "idempotency_key": attempt.idempotency_key,
        }
        chosen: FaultRule | None = None
        for armed in self._faults:
            if not armed.rule.matches(values):
                continue
            armed.matched += 1
            if chosen is None and armed.rule.applies_to(armed.matched):
                chosen = armed.rule
        return chosen

    def _lookup_message(self, request: Request) -> _Reply:
        if not self.preset.lookup:
            return _Reply(_json(404, {"error": "not found"}))
        key = request.args.get("idempotency_key") or None
        credential = self._authenticate(request)
        with self._lock:
            if credential is None:
                attempt = _Attempt(idempotency_key=key)
                payload = {"error": "unauthenticated"}
                return self._record(attempt, outcome="unauthenticated", status=401, payload=payload)
            if key is None:
                return _Reply(_json(400, {"error": "missing idempotency_key parameter"}))
            found = self._log.find_acceptance(
                epoch=self._epoch, credential_id=credential.credential_id, idempotency_key=key
            )
        if found is None:
            return _Reply(_json(404, {"error": "not found"}))
        effect = found.effect
        answer: dict[str, Any] = {
            "id": effect.provider_message_id,
            "status": "accepted",
            "destination": effect.destination,
            "run_id": effect.run_id,
            "idempotency_key": effect.idempotency_key,
        }
        return _Reply(_json(200, answer))

    # -- admin API ----------------------------------------------------------------------

    def _admin(self, handler: Callable[[Request], _Reply]) -> Callable[[Request], _Reply]:
        def guarded(request: Request) -> _Reply:
            if not token_matches(self._admin_token, request.headers.get("X-Admin-Token")):
                return _Reply(_json(401, {"error": "unauthenticated"}))
            return handler(request)

        return guarded

    def _health(self, _request: Request) -> _Reply:
        with self._lock:
            epoch = self._epoch
        return _Reply(_json(200, {"ok": True, "epoch": epoch}))

    def _effects(self, request: Request) -> _Reply:
        filters: dict[str, list[str]] = {}
        epoch: int | None
        with self._lock:
            epoch = self._epoch
        for name in request.args:
            if name == "epoch":
                continue
            if name not in FILTER_COLUMNS:
                allowed = ", ".join(("epoch", *FILTER_COLUMNS))
                return _Reply(_json(400, {"error": f"unknown filter {name!r}; allowed: {allowed}"}))
            filters[name] = [v for v in request.args.getlist(name) if v != ""]
        raw_epoch = request.args.get("epoch", "")
        if raw_epoch == "all":
            epoch = None
        elif raw_epoch != "":
            try:
                epoch = int(raw_epoch)
            except ValueError:
                return _Reply(_json(400, {"error": "epoch must be an integer or 'all'"}))
        effects = self._log.query(epoch=epoch, filters=filters)
        return _Reply(_json(200, {"effects": [e.to_json() for e in effects]}))

    def _reset(self, _request: Request) -> _Reply:
        with self._lock:
            self._epoch = self._log.new_epoch(started_at=self.now())
            self._faults = []
            epoch = self._epoch
        return _Reply(_json(200, {"epoch": epoch}))

    def _set_faults(self, request: Request) -> _Reply:
        data = request.get_json(silent=True)
        if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
            return _Reply(_json(400, {"error": 'expected a JSON body {"rules": [rule, ...]}'}))
        try:
            rules = [FaultRule.from_json(item) for item in data["rules"]]
        except ProviderError as exc:
            return _Reply(_json(400, {"error": str(exc)}))
        with self._lock:
            self._faults = [_Armed(rule) for rule in rules]
        return _Reply(_json(200, {"rules": [rule.to_json() for rule in rules]}))

    def _clear_faults(self, _request: Request) -> _Reply:
        with self._lock:
            self._faults = []
        return _Reply(_json(200, {"rules": []}))

    def _advance_clock(self, request: Request) -> _Reply:
        data = request.get_json(silent=True)
        seconds = data.get("advance_s") if isinstance(data, dict) else None
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            return _Reply(_json(400, {"error": 'expected {"advance_s": <finite number >= 0>}'}))
        with self._lock:
            self._clock_offset = self._log.advance_clock(float(seconds), at=time.time())
            now = self.now()
        return _Reply(_json(200, {"offset_s": self._clock_offset, "now": now}))
