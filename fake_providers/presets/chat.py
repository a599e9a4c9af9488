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
- The effect log keeps the recognizer whatever the switch says: from the ``recognizer``
  field, else the first ``ch-<12 hex>`` anywhere in the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from werkzeug.wrappers import Request, Response

from fake_providers._app import (
    Incoming,
    MessagePreset,
    PresetSpec,
    ProviderApp,
    Reply,
    Route,
    json_response,
    route_arg,
)
from fake_providers._options import switch

HIDDEN_COMMENT: Final = re.compile(r"<!--.*?-->", re.DOTALL)


def render(text: str, *, strip_metadata: bool) -> str:
    """What a reader sees: the text, minus HTML comments when metadata is stripped."""
    if not strip_metadata:
        return text
    return HIDDEN_COMMENT.sub("", text).strip()


class Chat(MessagePreset):
    """Every POST is a new message; the thread is the only way to check."""

    name = "chat"

    def __init__(self, core: ProviderApp, options: Mapping[str, Any]) -> None:
        super().__init__(core, options)
        self._last_ts = 0.0

    def extra_routes(self) -> list[Route]:
        return [Route("/v1/threads/<path:channel>", ("GET",), self.thread)]

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
        text = str(incoming.body["body"])
        content = json.dumps({"text": text, "metadata": metadata}, separators=(",", ":"))
        reply = {
            "ok": True,
            "channel": incoming.destination,
            "ts": ts,
            "message": {"text": text, "ts": ts},
        }
        return core.record(
            attempt,
            outcome="fresh",
            status=200,
            payload=reply,
            fault=incoming.fault_name,
            provider_message_id=ts,
            content=content,
        )

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


def _build(core: ProviderApp, options: Mapping[str, Any]) -> Chat:
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
)
