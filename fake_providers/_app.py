"""The shared core every preset plugs into: auth, scopes, the effect log, faults, admin API.

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
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, NamedTuple
from urllib.parse import urlencode
from wsgiref.types import StartResponse, WSGIEnvironment

from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from fake_providers import _browse
from fake_providers._body import body_hash
from fake_providers._clock import FileClock
from fake_providers._credentials import Credential, find_credential, token_matches
from fake_providers._effect_log import FILTER_COLUMNS, EffectLog
from fake_providers._errors import ProviderError
from fake_providers._identify import Identified, Identify, Seen
from fake_providers._options import IDENTIFY_OPTION, Option, option_json, resolve_options
from fake_providers._records import ACCEPTED_OUTCOMES, FaultRule

MESSAGE_FIELDS: Final = ("destination", "run_id", "delivery_id", "body", "recognizer")
"""The worker-facing JSON fields of every HTTP preset (recognizer optional for most)."""

MAX_BODY_BYTES: Final = 1 << 20
MAX_WAIT_S: Final = 30.0

_ROUTE_ARGS: Final = "fake_providers.route_args"

_EPOCH_ARG: Final = "fake_providers.epoch"
_EPOCH_PATH: Final = re.compile(r"^/epoch/(?P<epoch>[0-9]{1,12})(?P<rest>/.*)?$")

#: how often a ``slow`` request held on a followed clock file looks at the file again
CLOCK_POLL_S: Final = 0.01
#: how often a held reply looks whether its sender is gone (a select on its socket)
HOLD_POLL_S: Final = 0.05
#: how long a worker request waits for ``slow`` holds that are already due to be decided
DUE_HOLDS_WAIT_S: Final = 5.0

RECOGNIZER_RE: Final = re.compile(r"ch-[0-9a-f]{12}")
"""The content-visible canary a worker puts in its text (``[ref ch-0123456789ab]``)."""


class _Request(Request):
    max_content_length = MAX_BODY_BYTES


class Reply(NamedTuple):
    """What a handler produced: a response, or (``drop``) a connection to cut instead."""

    response: Response
    drop: bool = False


@dataclass(frozen=True)
class Route:
    """One URL rule a preset serves: werkzeug path, methods, handler."""

    path: str
    methods: tuple[str, ...]
    handler: Callable[[Request], Reply]


@dataclass
class Attempt:
    """What is known about one worker request so far; becomes one log record."""

    credential_id: str | None = None
    destination: str | None = None
    run_id: str | None = None
    delivery_id: str | None = None
    idempotency_key: str | None = None
    payload_hash: str | None = None
    recognizer: str | None = None
    #: why it was refused or failed, or ``unattributed: ...`` (its identity was not read)
    reason: str | None = None
    #: sha256 of the message text in its normal form (``fake_providers._body``)
    body_hash: str | None = None
    #: the Retry-After (seconds) the answer gave, if any
    retry_after: int | None = None
    #: the request exactly as received (HTTP body, SMTP DATA): kept in the log for the browse
    #: page, never listed by ``/_admin/in_flight`` or ``/_admin/drain``
    sent: bytes | None = field(default=None, repr=False)

    def log_fields(self) -> dict[str, Any]:
        """The fields every log record carries (``sent`` is stored apart, as ``request``)."""
        return {k: v for k, v in vars(self).items() if k != "sent"}

    def match_values(self) -> dict[str, str | None]:
        """The fields a ``FaultRule.match`` can name."""
        return {
            "destination": self.destination,
            "run_id": self.run_id,
            "delivery_id": self.delivery_id,
            "idempotency_key": self.idempotency_key,
        }


@dataclass
class Incoming:
    """A validated, authenticated, in-scope worker message handed to a preset's hooks."""

    attempt: Attempt
    body: dict[str, Any]
    credential: Credential
    request: Request
    fault: FaultRule | None = None
    #: the request as the identification rules saw it
    seen: Seen = field(default_factory=Seen)
    #: the message text (a chat message, a queue body, a webhook's payload)
    text: str = ""

    @property
    def fault_name(self) -> str | None:
        """The fault applied to this request (logged with its record), if any."""
        return None if self.fault is None else self.fault.fault

    @property
    def key(self) -> str:
        """The dedupe key (only call where the preset made it mandatory)."""
        assert self.attempt.idempotency_key is not None
        return self.attempt.idempotency_key

    @property
    def destination(self) -> str:
        """The destination the identification rule read ("" if it found none)."""
        return self.attempt.destination or ""


@dataclass
class _Armed:
    """A fault rule, how many requests have matched it in this epoch, and its dice."""

    rule: FaultRule
    matched: int = 0
    #: requests this rule was applied to (the harness confirms a planned fault landed)
    fired: int = 0
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def arm(cls, rule: FaultRule) -> _Armed:
        return cls(rule=rule, rng=random.Random(rule.seed or 0))


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


def json_response(
    status: int,
    payload: Mapping[str, Any] | Sequence[Any],
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A compact JSON response."""
    return raw_json(status, json.dumps(payload, separators=(",", ":")), headers)


def raw_json(status: int, body: str, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response from already-serialised text (used to replay saved replies)."""
    return Response(body, status=status, headers=dict(headers or {}), mimetype="application/json")


def payload_hash(body: Any) -> str:
    """sha256 of the canonical JSON body (sorted keys, compact, UTF-8), or of raw bytes."""
    if isinstance(body, bytes):
        return hashlib.sha256(body).hexdigest()
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def find_recognizer(text: object) -> str | None:
    """The first ``ch-<12 hex>`` in ``text`` (a string), if any."""
    if not isinstance(text, str):
        return None
    found = RECOGNIZER_RE.search(text)
    return None if found is None else found.group(0)


def route_arg(request: Request, name: str) -> str:
    """A variable part of the matched URL rule (``<path:channel>`` -> ``channel``)."""
    args = request.environ.get(_ROUTE_ARGS) or {}
    return str(args.get(name, ""))


def request_epoch(request: Request) -> int | None:
    """The epoch named by the URL's ``/epoch/<N>`` prefix, if the request had one."""
    value = request.environ.get(_EPOCH_ARG)
    return value if isinstance(value, int) else None


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, if well formed."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


# -- presets ----------------------------------------------------------------------------


class Preset:
    """Base of every preset: the semantics of one kind of provider, plugged into the core.

    ``core`` is the ``ProviderApp``; ``options`` are this instance's resolved options.
    """

    name: ClassVar[str] = ""

    def __init__(self, core: ProviderApp, options: Mapping[str, Any]) -> None:
        self.core = core
        self.options = dict(options)
        given = self.options.get("identify")
        #: the identification rule in force: the scenario's fields over the preset defaults
        self.identify: Identify = (given if isinstance(given, Identify) else Identify()).over(
            core.spec.identify
        )

    def routes(self) -> list[Route]:
        """Worker-facing URL rules (the admin API is added by the core)."""
        return []

    def start(self, host: str) -> dict[str, Any]:
        """Start any extra listener on ``host``; return extra fields for the ready line."""
        return {}

    def stop(self) -> None:
        """Stop what ``start`` started."""

    def info(self) -> dict[str, Any]:
        """Extra fields for ``GET /_admin/info``."""
        return {}


class MessagePreset(Preset):
    """An HTTP preset whose worker API is ``POST /v1/messages`` with the JSON message.

    The core validates (credential, body, key, scope), picks faults and logs; the preset
    answers four questions through hooks: which key a request carries (``key_of``), whether
    it may start now (``admit``, under the lock: e.g. 409 while the same key is in flight),
    what happens to it (``decide``, under the lock: dedupe, record, reply), and what to
    forget afterwards (``release``).
    """

    key_header: ClassVar[str | None] = None
    """Header carrying the dedupe key (logged as idempotency_key even when not honoured)."""
    missing_key_error: ClassVar[str] = "missing idempotency key"
    accepts_form: ClassVar[bool] = False
    """True if ``application/x-www-form-urlencoded`` bodies are taken (Stripe, Slack)."""
    text_fields: ClassVar[tuple[str, ...]] = ("body", "text", "content")
    """Body fields holding the message text (the first string one wins)."""

    @property
    def key_required(self) -> bool:
        """True if a request without a key is refused (400)."""
        return False

    def routes(self) -> list[Route]:
        return [Route("/v1/messages", ("POST",), self.core.handle_message), *self.extra_routes()]

    def extra_routes(self) -> list[Route]:
        """Lookups and surfaces."""
        return []

    def seen(self, request: Request, raw: bytes) -> Seen:
        """The request as the identification rules see it (the text: ``text_of``)."""
        seen = Seen.make(
            headers=request.headers.items(),
            path=request.path,
            query=request.args.to_dict(),
            raw=raw,
            content_type=request.headers.get("Content-Type", ""),
        )
        seen.text = self.text_of(seen)
        return seen

    def redact(self, request: Request, raw: bytes) -> bytes:
        """The request as it may be kept in the log (and shown on the browse page): a wire
        that carries a secret in the body (Slack's ``token`` field) blanks it here."""
        return raw

    def text_of(self, seen: Seen) -> str:
        """The message text: the first ``text_fields`` string in the body, else the body."""
        fields = seen.json if isinstance(seen.json, dict) else seen.form
        for name in self.text_fields:
            value = (fields or {}).get(name)
            if isinstance(value, str):
                return value
        return seen.text

    def body_error(self, seen: Seen) -> str | None:
        """Why the body cannot be taken at all (None: it can): a JSON object, or a form."""
        if isinstance(seen.json, dict) or (self.accepts_form and seen.form is not None):
            return None
        if seen.form is not None:
            return "body must be JSON (this endpoint takes no form bodies)"
        if seen.json_error is not None:
            return f"body must be a JSON object: {seen.json_error}"
        return f"body must be a JSON object, got {type(seen.json).__name__}"

    def validate(self, incoming: Incoming) -> tuple[int, str, str] | None:
        """A wire rule the request breaks, as (status, error, reason); None if it breaks none."""
        return None

    def refusal(self, request: Request, status: int, error: str, reason: str) -> tuple[int, Any]:
        """The (status, JSON body) a refusal takes on this wire; the reason is always in it."""
        return status, {"error": error, "reason": reason}

    def needs_attribution(self) -> tuple[str, ...]:
        """Fields a request must yield to be attributed (else logged ``unattributed: ...``)."""
        return ("run", "destination")

    def key_of(self, request: Request, body: Mapping[str, Any] | None) -> str | None:
        """The dedupe key this request carries (default: the ``key_header`` header)."""
        if self.key_header is None:
            return request.headers.get("Idempotency-Key") or None
        return request.headers.get(self.key_header) or None

    def authenticate(self, request: Request, raw: bytes) -> Credential | str:
        """The credential that signed or carries this request (default: bearer token), or
        the reason none did."""
        return self.core.bearer_or_reason(request)

    def admit(self, incoming: Incoming) -> Reply | None:
        """Under the lock, before processing: a reply to refuse the request now, or None."""
        return None

    def decide(self, incoming: Incoming) -> Reply:
        """Under the lock: dedupe, record (exactly one log record), reply."""
        raise NotImplementedError

    def release(self, incoming: Incoming) -> None:
        """Under the lock, after ``decide`` (or if it raised)."""


@dataclass(frozen=True)
class PresetSpec:
    """A preset as the registry knows it: name, what it models, options, factory."""

    name: str
    models: str
    options: tuple[Option, ...]
    factory: Callable[[ProviderApp, Mapping[str, Any]], Preset]
    identify: Identify = field(default_factory=Identify)
    """The preset's default identification rule (a scenario's rule overrides per field)."""

    def __post_init__(self) -> None:
        # Every preset takes an identification rule; the preset class holds its defaults.
        if not any(option.name == IDENTIFY_OPTION.name for option in self.options):
            object.__setattr__(self, "options", (*self.options, IDENTIFY_OPTION))

    def resolve(self, given: Mapping[str, object] | None) -> dict[str, Any]:
        """Validated options: defaults overlaid with ``given``."""
        return resolve_options(self.name, self.options, given)


# -- the core ---------------------------------------------------------------------------


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
        self._admin_token = admin_token
        self._clock = clock
        self.lock = threading.Lock()
        self._flights_changed = threading.Condition(self.lock)
        self._closing = threading.Event()
        self._epoch = log.current_epoch()
        self._clock_offset = log.clock_offset()
        path = log.epoch_clock_path(self._epoch)
        self._clock_file: FileClock | None = None if path is None else FileClock(path)
        self._faults: list[_Armed] = []
        #: the far-side crash point armed (``/_admin/hold``); guarded by ``_hold_changed``
        self._hold: _Hold | None = None
        self._hold_changed = threading.Condition(threading.Lock())
        #: set on the thread whose append reached the hold: that thread holds its reply
        self._hold_here = threading.local()
        self._flights: dict[int, _Flight] = {}
        self._next_flight = 0
        self._minted: dict[tuple[int, str, str], int] = {}
        self._mint_salt = log.size()  # a restarted provider never re-mints an earlier id
        self._mint_lock = threading.Lock()
        self.preset = spec.factory(self, self.options)
        routes = [
            *self.preset.routes(),
            Route("/_admin/health", ("GET",), self._health),
            Route("/_admin/info", ("GET",), self._admin(self._info)),
            Route("/_admin/effects", ("GET",), self._admin(self._effects)),
            Route("/_admin/reset", ("POST",), self._admin(self._reset)),
            Route("/_admin/faults", ("POST",), self._admin(self._set_faults)),
            Route("/_admin/faults", ("DELETE",), self._admin(self._clear_faults)),
            Route("/_admin/faults", ("GET",), self._admin(self._fault_stats)),
            Route("/_admin/clock", ("POST",), self._admin(self._advance_clock)),
            Route("/_admin/in_flight", ("GET",), self._admin(self._in_flight)),
            Route("/_admin/drain", ("POST",), self._admin(self._drain)),
            Route("/_admin/audit", ("GET",), self._admin(self._audit)),
            Route("/_admin/hold", ("POST",), self._admin(self._arm_hold)),
            Route("/_admin/hold", ("DELETE",), self._admin(self._disarm_hold)),
            Route("/_admin/held", ("GET",), self._admin(self._held)),
            Route(_browse.PATH, ("GET",), self._browse),
        ]
        self._handlers = {str(i): route.handler for i, route in enumerate(routes)}
        self._url_map = Map(
            [Rule(r.path, methods=list(r.methods), endpoint=str(i)) for i, r in enumerate(routes)]
        )

    def start(self, host: str) -> dict[str, Any]:
        """Start the preset's extra listeners on ``host``; return extra ready-line fields."""
        return self.preset.start(host)

    def close(self) -> None:
        """Release held replies and stop the preset's listeners."""
        self._closing.set()
        with self.lock:
            self._flights_changed.notify_all()  # replies held on it (``hold_reply``) go now
        self.preset.stop()

    # -- WSGI ---------------------------------------------------------------------------

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Route, handle (logging first), then reply, or cut the connection for a drop."""
        stale = self._strip_epoch(environ)
        request = _Request(environ)
        try:
            endpoint, args = self._url_map.bind_to_environ(environ).match()
            environ[_ROUTE_ARGS] = args
            handler = self._handlers[str(endpoint)]
            worker_route = not str(environ.get("PATH_INFO", "")).startswith(
                ("/_admin/", _browse.PATH)
            )
            if stale is not None and worker_route and handler != self.handle_message:
                reply = Reply(json_response(410, stale))
            else:
                if worker_route:
                    self._decide_due_holds()
                reply = handler(request)
                if worker_route and self.claim_hold():
                    self._hold_http(environ, getattr(self._hold_here, "claimed", None))
                    reply = Reply(json_response(503, {"error": "held"}), drop=True)
        except HTTPException as exc:
            code = exc.code or 500
            reply = Reply(json_response(code, {"error": exc.name.lower()}))
        if reply.drop:
            sock = environ.get("werkzeug.socket")
            if not isinstance(sock, socket.socket):
                return json_response(500, {"error": "accept_then_drop needs the werkzeug server"})(
                    environ, start_response
                )
            # The effect is already committed. Cut both directions so the client sees the
            # connection close with no response at all; werkzeug's write then fails with
            # BrokenPipeError, which it treats as a dropped connection (no traceback).
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return reply.response(environ, start_response)

    def _strip_epoch(self, environ: WSGIEnvironment) -> dict[str, Any] | None:
        """Take a ``/epoch/<N>`` prefix off the path (noting N for the handlers); return the
        410 payload if N is not the current epoch, else None."""
        found = _EPOCH_PATH.match(str(environ.get("PATH_INFO", "")))
        if found is None:
            return None
        epoch = int(found.group("epoch"))
        environ["PATH_INFO"] = found.group("rest") or "/"
        environ[_EPOCH_ARG] = epoch
        with self.lock:
            current = self._epoch
        if epoch == current:
            return None
        return stale_payload(epoch, current)

    def _decide_due_holds(self) -> None:
        """Before serving a worker request, let every ``slow`` request whose hold is over on
        the provider clock be decided first: a reader never sees a world in which a request
        that was due has not landed yet, however fast the clock was moved."""
        with self.lock:
            self._flights_changed.notify_all()  # held requests look at the clock again
            self._flights_changed.wait_for(
                lambda: (
                    not any(
                        f.stage == "slow" and f.due is not None and f.due <= self.now()
                        for f in self._flights.values()
                    )
                ),
                timeout=DUE_HOLDS_WAIT_S,
            )

    # -- services for presets -----------------------------------------------------------

    def now(self) -> float:
        """The provider clock: the followed clock file's reading if the epoch has one, else
        wall clock plus every advance recorded in the log."""
        if self._clock_file is not None:
            return self._clock_file.now()
        return self._clock() + self._clock_offset

    @property
    def follows_clock_file(self) -> bool:
        """True while the current epoch's clock is a file someone else moves."""
        return self._clock_file is not None

    @property
    def epoch(self) -> int:
        """The current epoch (read it under ``lock`` when it must not move)."""
        return self._epoch

    def mint_id(self, attempt: Attempt, prefix: str, nbytes: int = 8) -> str:
        """A provider-side id (message, delivery, order) for ``attempt``.

        Drawn from the epoch, the attempt's key, how many ids that key has had in this epoch
        and the log's size when this process started, not from a random source: two runs of
        one seed then write the same ids into their reports, yet no two effects of one
        provider share an id, and a race between workers sending different keys cannot
        shuffle which key gets which id.
        """
        key = attempt.idempotency_key or attempt.delivery_id or attempt.destination or ""
        with self._mint_lock:
            slot = (self._epoch, prefix, key)
            n = self._minted.get(slot, 0)
            self._minted[slot] = n + 1
        seed = f"{self._mint_salt}\0{slot[0]}\0{prefix}\0{key}\0{n}".encode()
        return prefix + hashlib.sha256(seed).hexdigest()[: 2 * nbytes]

    def pause(self, seconds: float) -> None:
        """Hold the calling thread (a slow or held reply); returns early when closing."""
        self._closing.wait(seconds)

    def bearer_credential(self, request: Request) -> Credential | None:
        """The credential whose secret is the request's bearer token, if any."""
        token = bearer_token(request)
        return None if token is None else find_credential(self.credentials, token)

    def bearer_or_reason(self, request: Request) -> Credential | str:
        """The bearer token's credential, or why there is none (never showing a secret)."""
        header = request.headers.get("Authorization")
        if header is None:
            return "no Authorization header (expected: Authorization: Bearer <secret>)"
        credential = self.bearer_credential(request)
        if credential is not None:
            return credential
        if bearer_token(request) is None:
            scheme = header.partition(" ")[0] or "(empty)"
            return f"Authorization scheme {scheme!r} is not Bearer <secret>"
        return "the bearer token matches no credential of this provider"

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
            self._count_for_hold(written.epoch, written.seq)

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
        """Count one request against every rule it matches; return the first that fires.

        ``candidates`` are the request's match values (several for an SMTP message with
        several recipients: a rule matches if any of them does). Caller holds ``lock``.
        """
        chosen: _Armed | None = None
        for armed in self._faults:
            if not any(armed.rule.matches(values) for values in candidates):
                continue
            armed.matched += 1
            if not armed.rule.applies_to(armed.matched):
                continue
            # Draw for every eligible request, so one rule's dice never depend on others.
            fires = armed.rule.probability is None or armed.rng.random() < armed.rule.probability
            if fires and chosen is None:
                chosen = armed
        if chosen is None:
            return None
        chosen.fired += 1
        return chosen.rule

    def enter_flight(self, attempt: Attempt, stage: str, *, due: float | None = None) -> int:
        """Register a request as in flight (caller holds ``lock``); returns its token."""
        self._next_flight += 1
        self._flights[self._next_flight] = _Flight(
            attempt, stage, time.monotonic(), self._epoch, due
        )
        self._flights_changed.notify_all()
        return self._next_flight

    def flight_stage(self, token: int, stage: str) -> None:
        """Move an in-flight request to another stage (caller holds ``lock``)."""
        flight = self._flights.get(token)
        if flight is not None:
            flight.stage = stage
            self._flights_changed.notify_all()

    def flight_epoch(self, token: int) -> int:
        """The epoch a request was admitted in (caller holds ``lock``)."""
        flight = self._flights.get(token)
        return self._epoch if flight is None else flight.epoch

    def hold_slow(self, token: int, delay_s: float) -> None:
        """Hold a ``slow`` request (caller holds ``lock``; returns holding it again) until
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
            if left <= 0 or (due is not None and self.now() >= due):
                return
            self._flights_changed.wait(timeout=min(left, CLOCK_POLL_S))

    def hold_reply(self, token: int, hold_s: float) -> None:
        """Hold a processed request's reply (a ``timeout`` fault) ``hold_s`` wall seconds, or
        until the server closes or a drain cuts it (``/_admin/drain`` with ``senders_gone``).

        The effect is in the log already: only the sender can tell when the reply goes, and
        a drain that says every sender has gone (the harness drains once its workers have
        ended) leaves nobody to tell, so the rest of the hold would only delay the next case.
        """
        until = time.monotonic() + hold_s
        with self.lock:
            while self.keeps_reply(token, until):
                self._flights_changed.wait(timeout=until - time.monotonic())

    def keeps_reply(self, token: int, until: float) -> bool:
        """Whether a reply held until ``until`` (monotonic) is still held: not once the
        server closes, the drain cut it (``hold_reply``) or the time is up."""
        flight = self._flights.get(token)
        return (
            not self._closing.is_set()
            and flight is not None
            and not flight.reply_cut
            and time.monotonic() < until
        )

    def leave_flight(self, token: int) -> None:
        """The request has been answered (caller holds ``lock``)."""
        self._flights.pop(token, None)
        self._flights_changed.notify_all()

    # -- far-side crash points ------------------------------------------------------------

    def _count_for_hold(self, epoch: int, seq: int) -> None:
        """An accepted effect was just committed to the log: count it against the armed
        hold; the one that makes ``nth`` marks this thread to hold its reply."""
        with self._hold_changed:
            hold = self._hold
            if hold is None or hold.epoch != epoch or hold.seq is not None:
                return
            hold.counted += 1
            if hold.counted == hold.nth:
                hold.seq = seq
                self._hold_here.hold = hold

    def claim_hold(self) -> bool:
        """Whether this thread's request reached the armed hold (its effect is committed):
        then its caller holds the reply and never sends it. Takes the mark off the thread."""
        hold = getattr(self._hold_here, "hold", None)
        self._hold_here.hold = None
        self._hold_here.claimed = hold  # this thread's held request, for _hold_http
        if hold is None:
            return False
        with self._hold_changed:
            hold.holding = True
            hold.held_at = time.monotonic()
            self._hold_changed.notify_all()
        return True

    def hold_over(self, epoch: int) -> bool:
        """Whether a held reply of ``epoch`` may stop waiting: the server is closing or the
        epoch is over (the harness moved on); its connection is then cut, never answered."""
        return self._closing.is_set() or self._epoch != epoch

    def _hold_http(self, environ: WSGIEnvironment, hold: _Hold | None) -> None:
        """Hold an HTTP reply: wait until the client has gone (it was killed: its socket
        closed) or the epoch is over, then return (the caller cuts the connection). When the
        client goes, the hold notes when (``sender_gone_at``)."""
        epoch = self._epoch
        sock = environ.get("werkzeug.socket")
        gone = self._sender_gone(hold)
        while not self.hold_over(epoch):
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
                return gone()  # reset by the peer: the sender is gone
            if not peeked:
                return gone()  # end of stream: the sender is gone
            self._closing.wait(HOLD_POLL_S)  # it sent more (pipelining): it is still there

    def _sender_gone(self, hold: _Hold | None) -> Callable[[], None]:
        def gone() -> None:
            if hold is not None:
                with self._hold_changed:
                    if hold.sender_gone_at is None:
                        hold.sender_gone_at = time.monotonic()
                    self._hold_changed.notify_all()

        return gone

    def _arm_hold(self, request: Request) -> Reply:
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
        with self.lock:
            current = self._epoch
        if epoch != current:
            return Reply(json_response(409, stale_payload(epoch, current)))
        with self._hold_changed:
            self._hold = _Hold(epoch=epoch, nth=nth)
            self._hold_changed.notify_all()
        return Reply(json_response(200, {"epoch": epoch, "nth": nth}))

    def _disarm_hold(self, _request: Request) -> Reply:
        """DELETE /_admin/hold: no further request is held. A reply already held stays held
        (never sent) until its sender is gone or its epoch is over."""
        with self._hold_changed:
            hold, self._hold = self._hold, None
            self._hold_changed.notify_all()
        return Reply(json_response(200, _hold_json(hold)))

    def _held(self, request: Request) -> Reply:
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
        with self._hold_changed:
            armed = self._hold
            if armed is None or armed.epoch != epoch:
                return Reply(json_response(200, _hold_json(None)))
            self._hold_changed.wait_for(
                lambda: armed.holding or self._hold is not armed or self._closing.is_set(),
                timeout=max(timeout_s, 0.0),
            )
            return Reply(json_response(200, _hold_json(armed)))

    # -- the shared worker pipeline for MessagePreset -----------------------------------

    def handle_message(self, request: Request) -> Reply:
        """A worker send on any of the preset's wire routes: credential (401), size (413),
        key and body (400), the wire's own rules, scope (403), then faults and the preset's
        decision. Every path appends exactly one record, and every refusal says why, in the
        record and in the reply. Who the delivery is for is read by the preset's
        ``Identify`` rule; a request it cannot attribute is still processed as the real
        provider would, and its record says ``unattributed: ...``."""
        preset = self.preset
        assert isinstance(preset, MessagePreset)
        try:
            raw: bytes | None = request.get_data(cache=False)
        except RequestEntityTooLarge:
            raw = None
        seen = preset.seen(request, raw or b"")
        found: Identified = preset.identify.read(seen)
        fields_ = seen.json if isinstance(seen.json, dict) else seen.form
        attempt = Attempt(
            idempotency_key=preset.key_of(request, fields_),
            destination=found.values["destination"],
            run_id=found.values["run"],
            delivery_id=found.values["delivery"],
            recognizer=found.values["recognizer"] or find_recognizer(seen.text),
            reason=found.unattributed(preset.needs_attribution()),
            body_hash=body_hash(seen.text) if seen.text else None,
            sent=None if raw is None else preset.redact(request, raw),
        )
        credential = preset.authenticate(request, raw or b"")
        asked = request_epoch(request)

        def refuse(outcome: str, status: int, error: str, reason: str) -> Reply:
            code, payload = preset.refusal(request, status, error, reason)
            return self.record(
                attempt, outcome=outcome, status=code, payload=payload, reason=reason
            )

        with self.lock:
            if asked is not None and asked != self._epoch:
                # A worker of an epoch that is over: never counted in the current one.
                stale = stale_payload(asked, self._epoch)
                return self.record(
                    attempt,
                    outcome="stale_epoch",
                    status=410,
                    payload=stale,
                    epoch=asked if asked < self._epoch else None,
                    reason=stale["error"],
                )
            if isinstance(credential, str):
                return refuse("unauthenticated", 401, "unauthenticated", credential)
            attempt.credential_id = credential.credential_id
            if raw is None:
                text = f"body larger than {MAX_BODY_BYTES} bytes"
                return refuse("rejected", 413, text, text)
            if preset.key_required and attempt.idempotency_key is None:
                where = f"no {preset.key_header} header" if preset.key_header else "no key"
                return refuse("rejected", 400, preset.missing_key_error, where)
            bad_body = preset.body_error(seen)
            if bad_body is not None:
                return refuse("rejected", 400, bad_body, bad_body)
            body: dict[str, Any] = dict(fields_ or {})
            hashed: Any = seen.json if seen.json is not None else body
            if request.path not in ("/v1/messages", "/"):
                hashed = {"endpoint": request.path, "params": hashed}
            attempt.payload_hash = payload_hash(hashed)
            incoming = Incoming(attempt, body, credential, request, seen=seen, text=seen.text)
            broken = preset.validate(incoming)
            if broken is not None:
                return refuse("rejected", *broken)
            if not credential.allows(incoming.destination):
                globs = ", ".join(credential.scope)
                said = repr(incoming.destination) if attempt.destination else "no destination"
                if attempt.destination is None:
                    said += f" ({found.misses.get('destination', 'no rule')})"
                reason = f"destination out of scope: {said} is outside {globs}"
                return refuse("refused", 403, "destination out of scope", reason)
            fault = self.pick_fault([attempt.match_values()])
            if fault is not None and fault.fault == "status":
                return self._status_fault(incoming, fault)
            incoming.fault = fault
            early = preset.admit(incoming)
            if early is not None:
                return self._deliver(early, fault)
            slow = fault is not None and fault.fault == "slow"
            due = self.now() + (fault.delay_s or 0.0) if fault is not None and slow else None
            token = self.enter_flight(attempt, "slow" if slow else "busy", due=due)
        try:
            with self.lock:
                if fault is not None and slow:
                    assert fault.delay_s is not None
                    self.hold_slow(token, fault.delay_s)
                    self.flight_stage(token, "busy")
                admitted_in = self.flight_epoch(token)
                if admitted_in != self._epoch:
                    # Its epoch ended while it was held (the drain gave up): refuse it in its
                    # own epoch; deciding it now would count it in the next case.
                    preset.release(incoming)
                    stale = stale_payload(admitted_in, self._epoch)
                    return self.record(
                        attempt,
                        outcome="stale_epoch",
                        status=410,
                        payload=stale,
                        fault=incoming.fault_name,
                        epoch=admitted_in,
                        reason=stale["error"],
                    )
                try:
                    reply = preset.decide(incoming)
                finally:
                    preset.release(incoming)
                if fault is not None and fault.fault == "timeout":
                    self.flight_stage(token, "held")
            if fault is not None and fault.fault == "timeout":
                assert fault.hold_s is not None
                self.hold_reply(token, fault.hold_s)
            return self._deliver(reply, fault)
        finally:
            with self.lock:
                self.leave_flight(token)

    def _status_fault(self, incoming: Incoming, fault: FaultRule) -> Reply:
        assert fault.status is not None
        headers: dict[str, str] = {}
        key_header = getattr(self.preset, "key_header", None)
        if key_header and incoming.attempt.idempotency_key:
            headers[key_header] = incoming.attempt.idempotency_key
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
            incoming.attempt.retry_after = fault.retry_after
        payload = {"error": "injected fault", "status": fault.status}
        return self.record(
            incoming.attempt,
            outcome="failed_by_fault",
            status=fault.status,
            payload=payload,
            headers=headers,
            fault="status",
            reason=f"injected fault: status {fault.status} (not processed; the key is not used)",
        )

    @staticmethod
    def _deliver(reply: Reply, fault: FaultRule | None) -> Reply:
        if fault is not None and fault.drops:
            return reply._replace(drop=True)
        return reply

    # -- admin API ----------------------------------------------------------------------

    def _admin(self, handler: Callable[[Request], Reply]) -> Callable[[Request], Reply]:
        def guarded(request: Request) -> Reply:
            if not token_matches(self._admin_token, request.headers.get("X-Admin-Token")):
                return Reply(json_response(401, {"error": "unauthenticated"}))
            return handler(request)

        return guarded

    def _browse(self, request: Request) -> Reply:
        """GET /_browse[?epoch=N|all]: the browse page (HTML). Needs the admin token (the
        ``X-Admin-Token`` header, or once as ``?token=``, which sets a cookie and redirects
        to the same page without it) unless the page is open."""
        headers = {
            "Content-Security-Policy": _browse.CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store",
        }
        if not self.browse_open:
            given = request.args.get("token")
            if given is not None:
                if not token_matches(self._admin_token, given):
                    return Reply(_html(401, _browse.login_page(), headers))
                rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
                target = _browse.PATH + ("?" + urlencode(rest) if rest else "")
                response = Response(status=303, headers={**headers, "Location": target})
                response.set_cookie(
                    _browse.COOKIE,
                    _browse.cookie_value(self._admin_token),
                    path=_browse.PATH,
                    httponly=True,
                    samesite="Strict",
                )
                return Reply(response)
            by_header = token_matches(self._admin_token, request.headers.get("X-Admin-Token"))
            by_cookie = token_matches(
                _browse.cookie_value(self._admin_token), request.cookies.get(_browse.COOKIE)
            )
            if not (by_header or by_cookie):
                return Reply(_html(401, _browse.login_page(), headers))
        with self.lock:
            current = self._epoch
        raw_epoch = request.args.get("epoch", "")
        shown: int | None = current
        if raw_epoch == "all":
            shown = None
        elif raw_epoch:
            try:
                shown = int(raw_epoch)
            except ValueError:
                return Reply(json_response(400, {"error": "epoch must be an integer or 'all'"}))
        page = _browse.render_page(
            preset=self.spec.name,
            models=self.spec.models,
            options={**self.options, "identify": getattr(self.preset, "identify", None)},
            current_epoch=current,
            shown_epoch=shown,
            records=self.log.everything(epoch=shown),
        )
        return Reply(_html(200, page, headers))

    def _health(self, _request: Request) -> Reply:
        with self.lock:
            epoch = self._epoch
        return Reply(json_response(200, {"ok": True, "epoch": epoch}))

    def _audit(self, request: Request) -> Reply:
        """GET /_admin/audit?epoch=N: whether epoch N (default: the current one) in the log
        file still holds exactly what this provider wrote, and which epoch is current now."""
        with self.lock:
            current = self._epoch
        raw = request.args.get("epoch", "")
        try:
            epoch = int(raw) if raw else current
        except ValueError:
            return Reply(json_response(400, {"error": "epoch must be an integer"}))
        found = self.log.audit(epoch)
        return Reply(
            json_response(
                200,
                {
                    "epoch": epoch,
                    "current_epoch": current,
                    "records": found.records,
                    "intact": found.intact,
                    "problems": list(found.problems),
                },
            )
        )

    def _info(self, _request: Request) -> Reply:
        options = {k: option_json(v) for k, v in self.options.items()}
        info = {"preset": self.spec.name, "models": self.spec.models, "options": options}
        return Reply(json_response(200, {**info, **self.preset.info()}))

    def _effects(self, request: Request) -> Reply:
        filters: dict[str, list[str]] = {}
        epoch: int | None
        with self.lock:
            epoch = self._epoch
        for name in request.args:
            if name == "epoch":
                continue
            if name not in FILTER_COLUMNS:
                allowed = ", ".join(("epoch", *FILTER_COLUMNS))
                return Reply(
                    json_response(400, {"error": f"unknown filter {name!r}; allowed: {allowed}"})
                )
            filters[name] = [v for v in request.args.getlist(name) if v != ""]
        raw_epoch = request.args.get("epoch", "")
        if raw_epoch == "all":
            epoch = None
        elif raw_epoch != "":
            try:
                epoch = int(raw_epoch)
            except ValueError:
                return Reply(json_response(400, {"error": "epoch must be an integer or 'all'"}))
        effects = self.log.query(epoch=epoch, filters=filters)
        return Reply(json_response(200, {"effects": [e.to_json() for e in effects]}))

    def _reset(self, request: Request) -> Reply:
        """A new epoch; an optional ``{"rules": [...], "clock_path": PATH}`` body arms its
        faults at once and makes the epoch's clock the reading in that clock file."""
        rules: list[FaultRule] = []
        clock_path: str | None = None
        if request.content_length:
            data = request.get_json(silent=True)
            shape = 'expected no body or {"rules": [rule, ...], "clock_path": PATH}'
            if (
                not isinstance(data, dict)
                or not isinstance(data.get("rules", []), list)
                or set(data) - {"rules", "clock_path"}
                or not isinstance(data.get("clock_path", ""), str)
            ):
                return Reply(json_response(400, {"error": shape}))
            clock_path = data.get("clock_path") or None
            try:
                rules = [FaultRule.from_json(item) for item in data.get("rules", [])]
                clock = None if clock_path is None else FileClock(clock_path)
                if clock is not None:
                    clock.now()
            except ProviderError as exc:
                return Reply(json_response(400, {"error": str(exc)}))
            except (OSError, ValueError) as exc:
                return Reply(json_response(400, {"error": f"clock_path: {exc}"}))
        else:
            clock = None
        with self.lock:
            if self._clock_file is not None:
                self._clock_file.close()
            self._clock_file = clock
            self._epoch = self.log.new_epoch(started_at=self.now(), clock_path=clock_path)
            with self._mint_lock:
                self._minted.clear()
            self._faults = [_Armed.arm(rule) for rule in rules]
            epoch = self._epoch
            self._flights_changed.notify_all()  # held requests of the old epoch look again
        return Reply(json_response(200, {"epoch": epoch}))

    def _set_faults(self, request: Request) -> Reply:
        data = request.get_json(silent=True)
        if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
            return Reply(
                json_response(400, {"error": 'expected a JSON body {"rules": [rule, ...]}'})
            )
        try:
            rules = [FaultRule.from_json(item) for item in data["rules"]]
        except ProviderError as exc:
            return Reply(json_response(400, {"error": str(exc)}))
        with self.lock:
            self._faults = [_Armed.arm(rule) for rule in rules]
        return Reply(json_response(200, {"rules": [rule.to_json() for rule in rules]}))

    def _fault_stats(self, _request: Request) -> Reply:
        """The armed rules in order, with how many requests each matched and was applied to."""
        with self.lock:
            stats = [
                {"rule": a.rule.to_json(), "matched": a.matched, "fired": a.fired}
                for a in self._faults
            ]
        return Reply(json_response(200, {"epoch": self._epoch, "rules": stats}))

    def _clear_faults(self, _request: Request) -> Reply:
        with self.lock:
            self._faults = []
        return Reply(json_response(200, {"rules": []}))

    def _advance_clock(self, request: Request) -> Reply:
        data = request.get_json(silent=True)
        seconds = data.get("advance_s") if isinstance(data, dict) else None
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            return Reply(
                json_response(400, {"error": 'expected {"advance_s": <finite number >= 0>}'})
            )
        with self.lock:
            if self._clock_file is not None:
                return Reply(
                    json_response(
                        409,
                        {
                            "error": "this epoch's clock follows a clock file; move the file",
                            "clock_path": self._clock_file.path,
                        },
                    )
                )
            self._clock_offset = self.log.advance_clock(float(seconds), at=time.time())
            now = self.now()
        return Reply(json_response(200, {"offset_s": self._clock_offset, "now": now}))

    def _in_flight(self, request: Request) -> Reply:
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
        with self.lock:

            def current() -> list[_Flight]:
                return [f for f in self._flights.values() if f.epoch == self._epoch]

            reached = self._flights_changed.wait_for(
                lambda: len(current()) >= wanted, timeout=max(timeout_s, 0.0)
            )
            flights = [
                {**f.attempt.log_fields(), "stage": f.stage, "age_s": time.monotonic() - f.since}
                for f in current()
            ]
        return Reply(json_response(200, {"reached": reached, "in_flight": flights}))

    def _drain(self, request: Request) -> Reply:
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
                    {
                        "error": "epoch must be an integer, timeout_s a number, "
                        "senders_gone a boolean"
                    },
                )
            )
        started = time.monotonic()
        with self.lock:
            wanted = self._epoch if epoch is None else epoch

            def of_epoch() -> list[_Flight]:
                return [f for f in self._flights.values() if f.epoch == wanted]

            waited_for = len(of_epoch())
            if senders_gone:
                for flight in of_epoch():
                    flight.reply_cut = True
                self._flights_changed.notify_all()
            drained = self._flights_changed.wait_for(
                lambda: not of_epoch(), timeout=min(max(float(timeout_s), 0.0), MAX_WAIT_S)
            )
            left = [
                {**f.attempt.log_fields(), "stage": f.stage, "age_s": time.monotonic() - f.since}
                for f in of_epoch()
            ]
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


def _html(status: int, page: str, headers: Mapping[str, str]) -> Response:
    return Response(page, status=status, headers=dict(headers), mimetype="text/html")


def stale_payload(asked: int, current: int) -> dict[str, Any]:
    """The 410 body for a request of an epoch that is not the current one."""
    return {
        "error": f"epoch {asked} is not the current epoch ({current}); request refused",
        "epoch": asked,
        "current_epoch": current,
    }
