"""``webhook``: a receiver following the Standard Webhooks specification.

Follows Standard Webhooks (https://www.standardwebhooks.com/, spec:
https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):

- Each delivery carries ``webhook-id`` (the same on every retry of one message: "can be
  used as an idempotency key"), ``webhook-timestamp`` (Unix seconds) and
  ``webhook-signature`` (space-separated ``v1,<base64 HMAC-SHA256>`` of
  ``"{id}.{timestamp}.{body}"``, keyed by the secret; a ``whsec_`` secret is base64 after
  the prefix). ``webhook-id`` is required here (400 without it).
- A receiver must reject a bad signature and a timestamp outside its tolerance (the spec's
  libraries use 5 minutes): 401, logged ``unauthenticated``. The tolerance is checked on the
  provider clock (``tolerance_s``). The signing secret is one of the provider's
  credentials; as a convenience for workers without signing, a bearer token is accepted too.
- Whether a duplicate ``webhook-id`` is processed twice is the receiver's choice. With
  ``dedupe`` on (the default), a repeat within ``window_s`` is acknowledged (200, with the
  first delivery's id) but not processed again, logged ``deduplicated``; after the window it
  is processed again, ``expired_then_accepted``. With ``dedupe`` off every delivery is
  processed (``fresh``), as a naive receiver does. Ids are scoped to the endpoint
  (destination).
- Any JSON body is taken (an object, an array, a string), posted to any path: the path is
  the endpoint (``POST /hooks/orders`` is destination ``hooks/orders``); the harness's own
  ``POST /v1/messages`` with a ``destination`` field still works (the default
  identification rule reads ``json:/destination`` first, then ``path:/{destination:path}``).
  The spec's headers are all a sender needs; run and the user's own id are read by the
  ``Identify`` rule (``X-Run-Id``/``run_id`` by default), never required.
- The sender's way to check after a timeout is the receiver's own record:
  ``GET /v1/deliveries`` (bearer; only destinations in the caller's scope) lists every
  delivery that reached the handler, duplicates marked by their outcome.

Receivers whose secret is in their URL, as generic JSON webhooks and Microsoft Teams' are:

- The secret may travel in a query parameter (``secret_query``: ``sig`` and ``token`` by
  default) or in a path segment (``secret_path`` templates such as ``/hooks/{secret}``,
  none by default: the path is otherwise the endpoint). The endpoint (destination) is then
  the path without its secret. Such a sender sends no ``webhook-id``: it is optional for
  it, honoured when sent, and without one every delivery is processed (``fresh``).
- Teams' Workflows ("When a Teams webhook request is received", a Power Automate / Logic
  Apps request trigger: https://learn.microsoft.com/azure/connectors/connectors-native-reqres,
  https://learn.microsoft.com/connectors/teams/#microsoft-teams-webhook) are posted at
  ``/workflows/<id>/triggers/<trigger>/paths/invoke?api-version=...&sp=...&sv=...&sig=<sig>``
  with an Adaptive Card message. With no Response action the trigger answers at once
  ``202 Accepted``, no body; it runs once per request (no key, nothing deduplicated).
  Errors take Logic Apps' ``{"error": {"code", "message"}}``: 401
  ``DirectApiAuthorizationRequired`` without a signature (quoted in
  https://github.com/MicrosoftDocs/azure-docs/issues/60706), 401
  ``DirectApiInvalidAuthorizationSignature`` for one that matches nothing, 400
  ``TriggerInputSchemaMismatch`` for a body it cannot read (the last two as Logic Apps
  answers them, not in Microsoft's documentation).
- A secret in the URL is never logged: the rules see the path without it and the query with
  ``<redacted>`` in its place (so no reason, destination or payload hash holds it), and a
  path segment or query value equal to any credential's secret is hidden the same way
  wherever it is.

An open receiver (``open``, off by default; for an internal endpoint that really takes
anything) accepts every request without a credential: nothing is refused 401 or 403, no
``webhook-id`` is required, each record's credential is ``(open)``, ``GET /v1/deliveries``
answers anyone and ``GET /_admin/info`` says ``"auth": ["open"]``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any, Final

from werkzeug.wrappers import Request, Response

from fake_providers._credentials import OPEN_CREDENTIAL_ID, Credential, find_credential
from fake_providers._errors import ProviderError
from fake_providers._identify import Identify, Seen
from fake_providers._message_preset import Incoming, MessagePreset
from fake_providers._options import globs, seconds, switch
from fake_providers._preset import Core, PresetSpec
from fake_providers._records import ACCEPTED_OUTCOMES
from fake_providers._reply import Reply, json_response
from fake_providers._routing import Route

OPEN: Final = Credential(credential_id=OPEN_CREDENTIAL_ID, secret="", scope=("*",))
REDACTED: Final = "<redacted>"
#: a Teams Workflows (Logic Apps request trigger) URL's path
TEAMS_PATH: Final = re.compile(r"/workflows/[^/]+/triggers/(?P<trigger>[^/]+)/paths/invoke(/.*)?")
#: Standard Webhooks' signature headers
SIGNATURE_HEADERS: Final = ("webhook-timestamp", "webhook-signature")


def signing_key(secret: str) -> bytes:
    """The HMAC key of a secret: base64 after ``whsec_``, else the secret's UTF-8 bytes."""
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        except binascii.Error:
            pass
    return secret.encode()


def sign(secret: str, webhook_id: str, timestamp: int | str, body: bytes) -> str:
    """The ``webhook-signature`` header value (``v1,<base64>``) a sender would send."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def check_secret_paths(templates: tuple[str, ...]) -> None:
    """Refuse a ``secret_path`` template that does not say where the secret is."""
    for template in templates:
        segments = template.split("/")
        if not template.startswith("/") or segments.count("{secret}") != 1:
            raise ProviderError(
                f"option 'secret_path': {template!r} must be a path with one whole"
                " {secret} segment, e.g. /hooks/{secret}"
            )


def _segment_pattern(template: str) -> re.Pattern[str]:
    """``/hooks/{secret}`` -> a pattern of the whole path; ``{secret}`` is the secret's
    segment, any other ``{name}`` one segment of anything."""
    out = []
    for segment in template.split("/"):
        if segment == "{secret}":
            out.append("(?P<secret>[^/]+)")
        elif re.fullmatch(r"\{[A-Za-z_][A-Za-z0-9_]*\}", segment):
            out.append("[^/]+")
        else:
            out.append(re.escape(segment))
    return re.compile("/".join(out))


class Webhook(MessagePreset):
    """Standard Webhooks receiver; dedupe on webhook-id is a switch. Also takes a secret in
    the URL (generic JSON webhooks, Teams' Workflows), and may be open."""

    name = "webhook"
    key_header = "webhook-id"
    missing_key_error = "missing webhook-id header"

    def __init__(self, core: Core, options: Mapping[str, Any]) -> None:
        super().__init__(core, options)
        self._secret_paths = [_segment_pattern(t) for t in self.options["secret_path"]]

    def extra_routes(self) -> list[Route]:
        return [
            Route("/v1/deliveries", ("GET",), self.deliveries),
            # The receiving endpoint: any path (the spec leaves URLs to the receiver).
            Route("/<path:endpoint>", ("POST",), self.core.handle_message),
        ]

    def info(self) -> dict[str, Any]:
        """How a request may authenticate here (``["open"]``: it need not)."""
        if self.options["open"]:
            return {"auth": ["open"]}
        auth = ["Authorization: Bearer", "Standard Webhooks signature"]
        auth += [f"query parameter {name}" for name in self.options["secret_query"]]
        auth += [f"path {template}" for template in self.options["secret_path"]]
        return {"auth": [*auth, "Teams Workflows URL (sig)"]}

    # -- the URL's secret ---------------------------------------------------------------

    def _path_secret(self, path: str) -> tuple[str, str] | None:
        """``(secret, path without it)`` if a ``secret_path`` template matches ``path``."""
        for pattern in self._secret_paths:
            found = pattern.fullmatch(path)
            if found is not None:
                start, end = found.span("secret")
                return found.group("secret"), (path[: start - 1] + path[end:]) or "/"
        return None

    def _url_secret(self, request: Request) -> tuple[str, str] | None:
        """``(where, secret)`` of a secret the URL carries: a ``secret_query`` parameter (on
        a Teams Workflows URL, its ``sig``), else a ``secret_path`` segment."""
        names = ("sig",) if _is_teams(request) else self.options["secret_query"]
        for name in names:
            value = request.args.get(name)
            if value:
                return f"query parameter {name}", value
        in_path = self._path_secret(request.path)
        if in_path is not None:
            return "path", in_path[0]
        return None

    def seen(self, request: Request, raw: bytes) -> Seen:
        """The request without the secret its URL carries: a ``secret_path`` segment, or
        any segment equal to a credential's secret, is taken out of the path (the rest is
        the endpoint); a ``secret_query`` value, or one equal to a secret, is redacted."""
        seen = super().seen(request, raw)
        in_path = self._path_secret(request.path)
        path = request.path if in_path is None else in_path[1]
        kept = [s for s in path.split("/") if not (s and self._is_secret(s))]
        seen.path = "/".join(kept) or "/"
        names = {*self.options["secret_query"], "sig"}
        seen.query = {
            k: REDACTED if (k in names and v) or (v and self._is_secret(v)) else v
            for k, v in seen.query.items()
        }
        return seen

    def _is_secret(self, text: str) -> bool:
        """True if ``text`` is one of this provider's secrets (compared in constant time)."""
        return find_credential(self.core.credentials, text) is not None

    # -- the wire -------------------------------------------------------------------------

    def validate(self, incoming: Incoming) -> tuple[int, str, str] | None:
        request = incoming.request
        if request.path.startswith("/_admin/"):
            return 404, "not found", f"{request.path} is no admin endpoint"
        if incoming.attempt.idempotency_key is None and self._key_required(request):
            return 400, self.missing_key_error, f"no {self.key_header} header"
        return None

    def _key_required(self, request: Request) -> bool:
        """A Standard Webhooks delivery (signed, or with a bearer token) carries its
        ``webhook-id``; a sender whose secret is in the URL (Teams among them) sends none,
        nor need anyone to an open receiver."""
        if self.options["open"] or _is_teams(request):
            return False
        headers = request.headers
        return "Authorization" in headers or any(h in headers for h in SIGNATURE_HEADERS)

    def refusal(self, request: Request, status: int, error: str, reason: str) -> tuple[int, Any]:
        if not _is_teams(request):
            return status, {"error": error, "reason": reason}
        if status in (401, 403):
            signed = "sig" in request.args or "Authorization" in request.headers
            code, message = (
                (
                    "DirectApiInvalidAuthorizationSignature",
                    "The provided authorization signature is not valid.",
                )
                if signed
                else (
                    "DirectApiAuthorizationRequired",
                    "The request must be authenticated only by Shared Access scheme.",
                )
            )
            return 401, {"error": {"code": code, "message": message}, "reason": reason}
        if status == 400:
            found = TEAMS_PATH.fullmatch(request.path)
            trigger = "manual" if found is None else found.group("trigger")
            message = (
                f"The input body for trigger '{trigger}' of type 'Request' did not match its"
                " schema definition."
            )
            code = "TriggerInputSchemaMismatch"
            return 400, {"error": {"code": code, "message": message}, "reason": reason}
        return status, {"error": {"code": error, "message": error}, "reason": reason}

    def body_error(self, seen: Seen) -> str | None:
        """Any JSON value is a payload (the spec: "the payload ... JSON"), not only objects."""
        return None if seen.json_error is None else f"body must be JSON: {seen.json_error}"

    def text_of(self, seen: Seen) -> str:
        found = seen.json.get("body") if isinstance(seen.json, dict) else None
        return found if isinstance(found, str) else seen.text

    def authenticate(self, request: Request, raw: bytes) -> Credential | str:
        if self.options["open"]:
            return OPEN  # an open receiver looks at no credential
        if request.headers.get("Authorization"):
            return self.core.bearer_or_reason(request)
        in_url = self._url_secret(request)
        signed = any(h in request.headers for h in SIGNATURE_HEADERS)
        if in_url is not None and not signed:
            where, secret = in_url
            found = find_credential(self.core.credentials, secret)
            return found or f"the secret in the URL ({where}) matches no credential"
        if not signed and not _is_teams(request):
            return (
                "no credential: no Authorization: Bearer, no Standard Webhooks signature"
                " (webhook-id, webhook-timestamp, webhook-signature) and no secret in the"
                f" URL ({self._url_ways()})"
            )
        if _is_teams(request) and not signed:
            return (
                "no sig query parameter (a Workflows URL carries api-version, sp, sv and"
                " sig) and no Authorization: Bearer"
            )
        return self._signature(request, raw)

    def _url_ways(self) -> str:
        ways = [f"query parameter {n}" for n in self.options["secret_query"]]
        ways += [f"path {t}" for t in self.options["secret_path"]]
        return " or ".join(ways) if ways else "none configured: secret_query, secret_path"

    def _signature(self, request: Request, raw: bytes) -> Credential | str:
        """The credential whose key signed this Standard Webhooks delivery, or why none."""
        webhook_id = request.headers.get("webhook-id", "")
        stamp = request.headers.get("webhook-timestamp")
        given = request.headers.get("webhook-signature")
        if stamp is None or given is None:
            missing = [
                h
                for h, v in (("webhook-timestamp", stamp), ("webhook-signature", given))
                if v is None
            ]
            return (
                f"no {' or '.join(missing)} header, and no Authorization: Bearer; a Standard"
                " Webhooks delivery is signed (webhook-id, webhook-timestamp, webhook-signature)"
            )
        presented = given.split()
        try:
            sent_at = int(stamp)
        except ValueError:
            return f"webhook-timestamp {stamp!r} is not an integer (Unix seconds)"
        skew = self.core.now() - sent_at
        if abs(skew) > self.options["tolerance_s"]:
            return (
                f"webhook-timestamp {stamp} is {abs(skew):.0f} s"
                f" {'behind' if skew > 0 else 'ahead of'} the provider clock;"
                f" tolerance_s is {self.options['tolerance_s']:g}"
            )
        found: Credential | None = None
        for credential in self.core.credentials.values():
            expected = sign(credential.secret, webhook_id, stamp, raw).encode()
            for candidate in presented:
                if hmac.compare_digest(expected, candidate.encode()):
                    found = credential
        if found is not None:
            return found
        versions = sorted({c.partition(",")[0] for c in presented}) or ["none"]
        return (
            "webhook-signature matches no credential: expected v1,<base64 HMAC-SHA256 of"
            " '{webhook-id}.{webhook-timestamp}.{body}'>"
            f" (got version(s) {', '.join(versions)}; the body must be signed exactly as sent)"
        )

    def decide(self, incoming: Incoming) -> Reply:
        core = self.core
        attempt = incoming.attempt
        now = core.now()
        teams = _is_teams(incoming.request)
        if teams or attempt.idempotency_key is None:
            # no key (a sender whose secret is in its URL), or Teams' trigger, which runs
            # once per request: every delivery is processed
            delivery = core.mint_id(attempt, "dlv_")
            recorded = core.record(
                attempt,
                outcome="fresh",
                status=202 if teams else 200,
                payload={"received": True, "id": delivery},
                fault=incoming.fault_name,
                provider_message_id=delivery,
                content=incoming.text,
            )
            if teams:  # "202 ACCEPTED", no body: no Response action in the flow
                return recorded._replace(response=Response(status=202))
            return recorded
        prior = core.log.find_acceptance(
            epoch=core.epoch, destination=incoming.destination, idempotency_key=incoming.key
        )
        fresh = prior is None or now - prior.effect.received_at >= self.options["window_s"]
        if self.options["dedupe"] and not fresh:
            assert prior is not None
            core.append(
                attempt,
                outcome="deduplicated",
                status=200,
                provider_message_id=prior.effect.provider_message_id,
                fault=incoming.fault_name,
                received_at=now,
            )
            reply = {"received": True, "duplicate": True, "id": prior.effect.provider_message_id}
            return Reply(json_response(200, reply))
        delivery = core.mint_id(attempt, "dlv_")
        expired = self.options["dedupe"] and prior is not None
        return core.record(
            attempt,
            outcome="expired_then_accepted" if expired else "fresh",
            status=200,
            payload={"received": True, "id": delivery},
            fault=incoming.fault_name,
            provider_message_id=delivery,
            save=True,
            content=incoming.text,
        )

    def deliveries(self, request: Request) -> Reply:
        """GET /v1/deliveries[?destination=D]: what this receiver got, oldest first (to
        anyone, if it is open)."""
        core = self.core
        credential = OPEN if self.options["open"] else core.bearer_credential(request)
        if credential is None:
            return Reply(json_response(401, {"error": "unauthenticated"}))
        wanted = request.args.get("destination") or None
        with core.lock:
            epoch = core.epoch
        outcomes = (*ACCEPTED_OUTCOMES, "deduplicated")
        found = core.log.messages(
            epoch=epoch, outcomes=outcomes, destinations=None if wanted is None else [wanted]
        )
        out = [
            {
                "id": m.effect.provider_message_id,
                "webhook_id": m.effect.idempotency_key,
                "destination": m.effect.destination,
                "run_id": m.effect.run_id,
                "delivery_id": m.effect.delivery_id,
                "recognizer": m.effect.recognizer,
                "outcome": m.effect.outcome,
                "received_at": m.effect.received_at,
                "body": m.content,
            }
            for m in found
            if m.effect.destination is not None and credential.allows(m.effect.destination)
        ]
        return Reply(json_response(200, {"deliveries": out}))


def _build(core: Core, options: Mapping[str, Any]) -> Webhook:
    return Webhook(core, options)


SPEC = PresetSpec(
    name="webhook",
    models="Standard Webhooks receiver (webhook-id dedupe on or off, signed deliveries)",
    options=(
        switch("dedupe", default=True, help="honour webhook-id (a repeat is not processed again)"),
        seconds("window_s", default=86_400, help="how long webhook-ids are remembered"),
        seconds("tolerance_s", default=300, help="accepted webhook-timestamp skew"),
        globs(
            "secret_query",
            default=("sig", "token"),
            help="query parameters that may carry the secret (Teams' Workflows: sig)",
        ),
        globs(
            "secret_path",
            help="path templates whose {secret} segment is the secret, e.g. /hooks/{secret}",
            check=check_secret_paths,
        ),
        switch(
            "open",
            default=False,
            help="accept every request without a credential (internal endpoints only)",
        ),
    ),
    factory=_build,
    identify=Identify.of(
        run=["json:/run_id", "header:X-Run-Id"],
        destination=["json:/destination", "path:/{destination:path}"],
        delivery=["json:/delivery_id", "header:X-Delivery-Id"],
        recognizer=["json:/recognizer", r"regex:ch-[0-9a-f]{12}"],
    ),
)


def _is_teams(request: Request) -> bool:
    """True for a Teams Workflows (Logic Apps request trigger) URL."""
    return TEAMS_PATH.fullmatch(request.path) is not None
