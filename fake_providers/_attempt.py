"""What one worker request is recognised as: who it is for, which delivery, which key.

Every record in the log is an ``Attempt``: the recipient, run and delivery the preset's
``Identify`` rule read, the dedupe key, the hashes that tell two sends of one message
apart from two messages (payload hash, body hash of the normal-form text) and the
canary a worker may put in its text. Reading them is kept apart from deciding what the
request gets, so every preset and the SMTP listener recognise requests the same way.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, Protocol

from werkzeug.wrappers import Request

from fake_providers._body import body_hash
from fake_providers._identify import Identified, Identify, Seen

RECOGNIZER_RE: Final = re.compile(r"ch-[0-9a-f]{12}")
"""The content-visible canary a worker puts in its text (``[ref ch-0123456789ab]``)."""


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


class Recognised(NamedTuple):
    """An HTTP send as its preset's rules read it, before any check on it."""

    attempt: Attempt
    #: the request as the identification rule saw it
    seen: Seen
    #: what the rule found per field, and why it missed the ones it did not
    found: Identified
    #: the body's fields: the JSON object, else the form, else None
    fields: Mapping[str, Any] | None


class ReadsSends(Protocol):
    """The hooks of a preset that say how its wire is read (``MessagePreset`` has them)."""

    @property
    def identify(self) -> Identify: ...

    def seen(self, request: Request, raw: bytes) -> Seen: ...

    def key_of(self, request: Request, body: Mapping[str, Any] | None) -> str | None: ...

    def needs_attribution(self) -> tuple[str, ...]: ...

    def redact(self, request: Request, raw: bytes) -> bytes: ...


def recognise(preset: ReadsSends, request: Request, raw: bytes | None) -> Recognised:
    """Read an HTTP send (``raw``: its body, None if it was too large) by the preset's
    rules: key, destination, run, delivery, canary, body hash and, if the rule cannot
    attribute it, ``unattributed: ...`` as its reason."""
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
    return Recognised(attempt, seen, found, fields_)


def request_payload_hash(request: Request, seen: Seen, body: Mapping[str, Any]) -> str:
    """The payload hash of an HTTP send: its JSON (or form fields), and for any endpoint
    but the plain ones the path too, so one body sent to two endpoints hashes apart. The
    path is the one the rules saw: a secret the URL carried is not in it (a hash of a short
    secret could be guessed back), and one message sent with two secrets hashes alike."""
    hashed: Any = seen.json if seen.json is not None else body
    if request.path not in ("/v1/messages", "/"):
        hashed = {"endpoint": seen.path, "params": hashed}
    return payload_hash(hashed)
