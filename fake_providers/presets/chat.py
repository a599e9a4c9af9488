"""``chat``: a Slack- or forum-like surface: no idempotency, no lookup, only the thread.

Follows Slack's ``chat.postMessage`` (https://api.slack.com/methods/chat.postMessage) and
message metadata (https://api.slack.com/metadata), and forums that render Markdown/HTML
(Discourse, GitHub comments), where an HTML comment is kept in the source but not shown:

- There is no idempotency key: every accepted POST is a new message with a new ``ts``, so a
  resend after a timeout is a second message (both logged ``fresh``). A key sent anyway
  (``Idempotency-Key``) is only logged.
- Slack attaches ``metadata`` (``event_type`` + ``event_payload``) to a message; clients do
  not display it. Here a ``recognizer`` field (and any ``metadata`` object) becomes the
  message's metadata; text the worker writes in ``<!-- ... -->`` stays in the source.
- After a timeout the only way to know is to read the rendered thread:
  ``GET /v1/threads/<channel>`` (``?format=text`` for plain text). With
  ``strip_metadata`` (a per-instance switch) the thread shows only visible text: HTML
  comments removed and metadata dropped, as an API that returns rendered text would. A
  recognizer then survives only if it is in the visible text (``[ref ch-...]``).
- The wire, as the providers document it: Slack's ``POST /api/chat.postMessage`` (JSON or
  form; ``channel`` and ``text``; the token as ``Authorization: Bearer`` or a ``token``
  form field). Slack answers HTTP 200 whether or not it worked: ``{"ok": true, "channel",
  "ts", "message"}`` or ``{"ok": false, "error": "channel_not_found" | "no_text" |
  "not_authed" | "invalid_auth"}`` (the fake adds ``"reason"``). Discord's execute webhook
  ``POST /api/webhooks/{webhook.id}/{webhook.token}`` (JSON ``content``; the token in the
  URL is the credential's secret; the webhook id is the destination): 204 with no body, or
  with ``?wait=true`` 200 and the created message; errors ``{"message", "code"}`` (50006
  empty message, 50027 invalid webhook token). Slack's incoming webhooks
  (https://api.slack.com/messaging/webhooks) ``POST /services/T…/B…/<secret>`` with JSON
  ``text`` (or ``blocks``/``attachments``; also a form's ``payload=<JSON>``): the secret in
  the URL is the credential's secret, the ``B…`` webhook is the destination (a ``channel``
  in the body changes nothing: an app's webhook posts where it was installed). It answers
  200 ``text/plain`` ``ok``, and errors as a plain-text string with an HTTP status
  (https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks:
  ``invalid_payload`` 400; and as senders report hooks.slack.com answering them,
  ``no_text`` 400, ``too_many_attachments`` 400, ``invalid_token`` 403 for a secret that
  is wrong or missing, ``no_service`` 404 for a webhook the secret is not for); the
  fake's reason is in the ``X-Fake-Provider-Reason`` header, the body stays Slack's. And
  the harness's ``POST /v1/messages``.
- A secret in a URL (Discord's token, a Slack webhook's secret) is never in the log: the
  rules see the path with ``{token}``/``{secret}`` in its place, so no reason, destination
  or payload hash holds it.
- The effect log keeps the recognizer whatever the switch says: from the ``recognizer``
  field, else the first ``ch-<12 hex>`` anywhere in the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

from werkzeug.wrappers import Request, Response

from fake_providers._credentials import Credential, find_credential
from fake_providers._identify import Identify, Seen
from fake_providers._message_preset import Incoming, MessagePreset
from fake_providers._options import switch
from fake_providers._preset import Core, PresetSpec
from fake_providers._reply import Reply, json_response, plain_text
from fake_providers._routing import Route, route_arg

HIDDEN_COMMENT: Final = re.compile(r"<!--.*?-->", re.DOTALL)


def render(text: str, *, strip_metadata: bool) -> str:
    """What a reader sees: the text, minus HTML comments when metadata is stripped."""
    if not strip_metadata:
        return text
    return HIDDEN_COMMENT.sub("", text).strip()


class Chat(MessagePreset):
    """Every POST is a new message; the thread is the only way to check."""

    name = "chat"

    def __init__(self, core: Core, options: Mapping[str, Any]) -> None:
        super().__init__(core, options)
        self._last_ts = 0.0

    accepts_form = True

    def extra_routes(self) -> list[Route]:
        handle = self.core.handle_message
        return [
            Route("/v1/threads/<path:channel>", ("GET",), self.thread),
            Route(SLACK_PATH, ("POST",), handle),
            Route(f"{SLACK_HOOKS}/<path:rest>", ("POST",), handle),
            Route("/api/webhooks/<hook>/<token>", ("POST",), handle),
            Route("/api/v<int:version>/webhooks/<hook>/<token>", ("POST",), handle),
        ]

    def seen(self, request: Request, raw: bytes) -> Seen:
        seen = super().seen(request, raw)
        wire = _wire(request)
        if wire == "discord":  # the token in the URL never reaches a reason
            head, _, _ = seen.path.rstrip("/").rpartition("/")
            seen.path = f"{head}/{{token}}"
        if wire == "slack_hook":
            seen.path = _hook_path(request.path)
            if seen.form is not None and "payload" in seen.form:
                # Slack: the JSON may travel as a form's payload parameter
                seen = Seen.make(
                    headers=request.headers.items(),
                    path=seen.path,
                    query=seen.query,
                    raw=seen.form["payload"].encode(),
                    content_type="application/json",
                )
                seen.text = self.text_of(seen)
        if seen.form is not None and "token" in seen.form:
            seen.form = {**seen.form, "token": REDACTED}
        return seen

    def redact(self, request: Request, raw: bytes) -> bytes:
        """Slack's form ``token`` is a secret: the log keeps the request without it."""
        if "token=" not in raw.decode("utf-8", "replace"):
            return raw
        pairs = parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
        if not any(k == "token" for k, _ in pairs):
            return raw
        return urlencode([(k, REDACTED if k == "token" else v) for k, v in pairs]).encode()

    def authenticate(self, request: Request, raw: bytes) -> Credential | str:
        if _wire(request) == "slack_hook":
            secret = _hook_secret(request.path)
            if secret is None:
                return (
                    "no webhook secret in the URL (expected"
                    f" {SLACK_HOOKS}/T.../B.../<secret>, the secret last)"
                )
            found = find_credential(self.core.credentials, secret)
            return found or "the webhook secret in the URL matches no credential of this provider"
        if _wire(request) == "discord":
            token = request.path.rstrip("/").rsplit("/", 1)[-1]
            found = find_credential(self.core.credentials, token)
            return found or "the webhook token in the URL matches no credential of this provider"
        if _wire(request) == "slack" and not request.headers.get("Authorization"):
            seen = Seen.make(
                headers=(),
                raw=raw,
                content_type=request.headers.get("Content-Type", ""),
            )
            field_token = (seen.form or {}).get("token")
            if field_token:
                found = find_credential(self.core.credentials, field_token)
                # Slack: a token may travel as a form field instead of a header.
                return found or "the token field matches no credential of this provider"
        return self.core.bearer_or_reason(request)

    def validate(self, incoming: Incoming) -> tuple[int, str, str] | None:
        wire = _wire(incoming.request)
        if wire == "legacy":
            return None
        if wire == "slack_hook":
            return _hook_rules(incoming)
        fields = incoming.body
        has_text = any(
            isinstance(fields.get(name), str | list) and fields.get(name)
            for name in ("text", "blocks", "attachments", "content", "embeds")
        )
        if wire == "slack" and not incoming.attempt.destination:
            return 400, "channel_not_found", "channel_not_found: no channel argument"
        if not has_text:
            if wire == "slack":
                return 400, "no_text", "no_text: one of text, blocks or attachments is required"
            return 400, "Cannot send an empty message", "content, embeds (or files) required"
        return None

    def refusal(self, request: Request, status: int, error: str, reason: str) -> tuple[int, Any]:
        wire = _wire(request)
        if wire == "slack_hook":
            return _hook_error(status, error)
        if wire == "slack":
            slack = {401: "invalid_auth", 403: "channel_not_found"}.get(status, error)
            if status == 401 and "no Authorization" in reason:
                slack = "not_authed"
            return 200, {"ok": False, "error": slack, "reason": reason}
        if wire == "discord":
            code, message = {
                401: (50027, "Invalid Webhook Token"),
                403: (50001, "Missing Access"),
            }.get(status, (50006 if "empty" in error else 50035, error))
            return status, {"message": message, "code": code, "reason": reason}
        return status, {"error": error, "reason": reason}

    def refusal_reply(self, request: Request, reply: Reply, reason: str) -> Reply:
        """Slack's incoming webhooks answer a bare error string, as text."""
        if _wire(request) != "slack_hook":
            return reply
        response = reply.response
        text = response.get_data(as_text=True)
        return reply._replace(response=plain_text(response.status_code, text, reason))

    def decide(self, incoming: Incoming) -> Reply:
        core = self.core
        attempt = incoming.attempt
        now = core.now()
        self._last_ts = max(now, self._last_ts + 1e-6)
        ts = f"{self._last_ts:.6f}"
        metadata: dict[str, Any] | None = None
        extra = incoming.body.get("metadata")
        if isinstance(extra, dict) or incoming.body.get("recognizer") is not None:
            payload = dict(extra) if isinstance(extra, dict) else {}
            for name in ("recognizer", "run_id", "delivery_id"):
                payload.setdefault(name, incoming.body.get(name))
            metadata = {"event_type": "crash_harness_delivery", "event_payload": payload}
        text = incoming.text
        content = json.dumps({"text": text, "metadata": metadata}, separators=(",", ":"))
        reply: dict[str, Any] = {
            "ok": True,
            "channel": incoming.destination,
            "ts": ts,
            "message": {"text": text, "ts": ts},
        }
        status = 200
        if _wire(incoming.request) == "discord":
            hook = incoming.request.path.rstrip("/").split("/")[-2]
            reply = {
                "id": ts.replace(".", ""),
                "type": 0,
                "channel_id": incoming.destination,
                "webhook_id": hook,
                "content": text,
                "timestamp": ts,
            }
            if incoming.request.args.get("wait", "").lower() != "true":
                status = 204
        recorded = core.record(
            attempt,
            outcome="fresh",
            status=status,
            payload=reply,
            fault=incoming.fault_name,
            provider_message_id=ts,
            content=content,
        )
        if status == 204:
            return recorded._replace(response=Response(status=204))
        if _wire(incoming.request) == "slack_hook":
            return recorded._replace(response=plain_text(200, "ok"))
        return recorded

    def thread(self, request: Request) -> Reply:
        """GET /v1/threads/<channel>: the channel's messages as a reader sees them."""
        core = self.core
        channel = route_arg(request, "channel")
        credential = core.bearer_credential(request)
        if credential is None:
            return Reply(json_response(401, {"error": "unauthenticated"}))
        if not credential.allows(channel):
            return Reply(json_response(403, {"error": "destination out of scope"}))
        with core.lock:
            epoch = core.epoch
        strip = self.options["strip_metadata"]
        messages: list[dict[str, Any]] = []
        for found in core.log.messages(epoch=epoch, destinations=[channel]):
            stored = json.loads(found.content or "{}")
            shown: dict[str, Any] = {
                "ts": found.effect.provider_message_id,
                "text": render(str(stored.get("text", "")), strip_metadata=strip),
            }
            if not strip and stored.get("metadata") is not None:
                shown["metadata"] = stored["metadata"]
            messages.append(shown)
        if request.args.get("format") == "text":
            text = "\n\n".join(m["text"] for m in messages)
            return Reply(Response(text, status=200, mimetype="text/plain"))
        return Reply(json_response(200, {"ok": True, "channel": channel, "messages": messages}))


def _build(core: Core, options: Mapping[str, Any]) -> Chat:
    return Chat(core, options)


SPEC = PresetSpec(
    name="chat",
    models="Slack/forum-like chat (no key, no lookup, rendered thread, hidden metadata)",
    options=(
        switch(
            "strip_metadata", default=False, help="thread shows visible text only (no metadata)"
        ),
    ),
    factory=_build,
    identify=Identify.of(
        run=[
            "json:/run_id",
            "form:run_id",
            "json:/metadata/event_payload/run_id",
            "header:X-Run-Id",
        ],
        destination=[
            # a Slack incoming webhook posts where it was installed, whatever the body says
            "path:/services/{team}/{destination}/{secret}",
            "json:/destination",
            "json:/channel",
            "form:channel",
            "path:/api/webhooks/{destination}/{token}",
            "path:/api/v{version}/webhooks/{destination}/{token}",
        ],
        delivery=[
            "json:/delivery_id",
            "form:delivery_id",
            "json:/metadata/event_payload/delivery_id",
            "header:X-Delivery-Id",
        ],
        recognizer=[
            "json:/recognizer",
            "json:/metadata/event_payload/recognizer",
            r"regex:ch-[0-9a-f]{12}",
        ],
    ),
)


SLACK_PATH = "/api/chat.postMessage"
SLACK_HOOKS = "/services"
REDACTED = "<redacted>"
#: a Slack message's parts, at least one of them not empty (chat.postMessage's ``no_text``)
SLACK_PARTS: Final = ("text", "blocks", "attachments")
#: "A maximum of 100 attachments are allowed on a message" (chat.postMessage)
MAX_ATTACHMENTS: Final = 100
#: the errors an incoming webhook answers with their own name (any other 4xx body error is
#: ``invalid_payload``), and the one each status of the core means on this wire
HOOK_ERRORS: Final = ("invalid_payload", "no_text", "too_many_attachments")
HOOK_STATUS: Final = {401: (403, "invalid_token"), 403: (404, "no_service")}


def _wire(request: Request) -> str:
    """Which wire a send came on: ``slack``, ``slack_hook`` (an incoming webhook),
    ``discord`` or ``legacy`` (/v1/messages)."""
    if request.path == SLACK_PATH:
        return "slack"
    if request.path.startswith(f"{SLACK_HOOKS}/"):
        return "slack_hook"
    if request.path.startswith("/api/"):
        return "discord"
    return "legacy"


def _hook_parts(path: str) -> list[str]:
    """``/services/T0/B0/secret`` -> ``["T0", "B0", "secret"]``."""
    return path.removeprefix(f"{SLACK_HOOKS}/").split("/")


def _hook_secret(path: str) -> str | None:
    """The secret of an incoming webhook's URL (its third segment), None if it has none."""
    parts = _hook_parts(path)
    return parts[2] if len(parts) >= 3 and parts[2] else None


def _hook_path(path: str) -> str:
    """The webhook's path as the rules (and every reason) see it: ``{secret}`` in place of
    the secret and of anything after it."""
    parts = _hook_parts(path)
    if len(parts) < 3:
        return path
    return "/".join([SLACK_HOOKS, *parts[:2], "{secret}"])


def _hook_rules(incoming: Incoming) -> tuple[int, str, str] | None:
    """What an incoming webhook refuses in a body it could read."""
    message = incoming.seen.json
    if not isinstance(message, dict):
        return (
            400,
            "invalid_payload",
            "invalid_payload: the message must be a JSON object (or a form's payload=<JSON>)",
        )
    if not any(isinstance(message.get(n), str | list) and message.get(n) for n in SLACK_PARTS):
        return 400, "no_text", "no_text: one of text, blocks or attachments is required"
    attachments = message.get("attachments")
    if isinstance(attachments, list) and len(attachments) > MAX_ATTACHMENTS:
        said = f"{len(attachments)} attachments, at most {MAX_ATTACHMENTS}"
        return 400, "too_many_attachments", f"too_many_attachments: {said}"
    return None


def _hook_error(status: int, error: str) -> tuple[int, str]:
    """An incoming webhook's refusal: its status and its bare error string."""
    if status in HOOK_STATUS:
        return HOOK_STATUS[status]
    if status == 400 and error in HOOK_ERRORS:
        return status, error
    return status, "invalid_payload"
