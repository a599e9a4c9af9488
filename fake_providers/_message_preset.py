"""The HTTP preset that takes a worker's message, and what its hooks are handed.

Five of the six presets take a worker's send on an HTTP route and differ only in their
wire (headers, body shape, refusals) and their decision (dedupe, record, reply). The core
runs one pipeline for all of them (``fake_providers._message``); this is the set of
questions it asks a preset along the way, with the answers a real provider would give by
default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from werkzeug.wrappers import Request

from fake_providers._attempt import Attempt
from fake_providers._credentials import Credential
from fake_providers._identify import Seen
from fake_providers._preset import Preset
from fake_providers._records import FaultRule
from fake_providers._reply import Reply
from fake_providers._routing import Route

MESSAGE_FIELDS: Final = ("destination", "run_id", "delivery_id", "body", "recognizer")
"""The worker-facing JSON fields of every HTTP preset (recognizer optional for most)."""


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

    def refusal_reply(self, request: Request, reply: Reply, reason: str) -> Reply:
        """The refusal as the wire sends it, once recorded (default: the JSON ``refusal``
        built); a wire that answers in plain text rewrites it here."""
        return reply

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
