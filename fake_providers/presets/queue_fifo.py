"""``queue-fifo``: an SQS FIFO-like queue deduplicating on ``MessageDeduplicationId``.

Follows Amazon SQS FIFO queues' exactly-once processing
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/using-messagededuplicationid-property.html):

- "If a message with a particular message deduplication ID is sent successfully, any
  messages sent with the same message deduplication ID are accepted successfully but aren't
  delivered during the 5-minute deduplication interval." Here: a duplicate within
  ``window_s`` (300 s) gets 200 with the original ``MessageId`` (the original reply is
  replayed), is logged ``deduplicated`` and is never handed to a consumer. SQS does not
  compare bodies: a different body with the same id is a duplicate too.
- "Amazon SQS continues to keep track of the message deduplication ID even after the message
  is received and deleted." Here: consuming a message (``POST
  /v1/queues/<queue>/receive``) does not forget its id.
- The id is scoped to the queue (the destination), not to the sender.
- With content-based deduplication enabled (``content_based_dedup``) a send without an id
  uses the SHA-256 of the body; without it, a send without an id is refused (400
  ``InvalidParameterValue``), as SQS does.
- After the interval the same id is a new message, logged ``expired_then_accepted``.
- There is no lookup: SQS cannot tell a sender whether an id was seen. ``GET /v1/messages``
  answers 405, and a worker that timed out can only resend within the interval.
- The wire: SQS's JSON protocol, ``POST /`` with ``X-Amz-Target: AmazonSQS.SendMessage``
  and ``{"QueueUrl", "MessageBody", "MessageDeduplicationId", "MessageGroupId"}`` (the
  dedupe id may be in the body or the header); the queue (destination) is the last path
  segment of ``QueueUrl`` (read as ``query:QueueName`` by the default rule). And the
  harness's ``POST /v1/messages`` with the ``MessageDeduplicationId`` header.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

from werkzeug.wrappers import Request

from fake_providers._identify import Identify, Seen
from fake_providers._message_preset import Incoming, MessagePreset
from fake_providers._options import seconds, switch
from fake_providers._preset import Core, PresetSpec
from fake_providers._reply import Reply, json_response, raw_json
from fake_providers._routing import Route, route_arg

MAX_RECEIVE = 10


class QueueFifo(MessagePreset):
    """SQS FIFO-like dedupe: duplicates answered as success and not delivered; no lookup."""

    name = "queue-fifo"
    key_header = "MessageDeduplicationId"
    missing_key_error = (
        "InvalidParameterValue: the queue should either have ContentBasedDeduplication "
        "enabled or MessageDeduplicationId provided explicitly"
    )

    def __init__(self, core: Core, options: Mapping[str, Any]) -> None:
        super().__init__(core, options)
        self._sequence = 0

    @property
    def key_required(self) -> bool:
        return True

    text_fields = ("body", "MessageBody")

    def extra_routes(self) -> list[Route]:
        return [
            Route("/v1/queues/<path:queue>/receive", ("POST",), self.receive),
            Route("/", ("POST",), self.core.handle_message),  # AmazonSQS.SendMessage
        ]

    def seen(self, request: Request, raw: bytes) -> Seen:
        seen = super().seen(request, raw)
        url = seen.json.get("QueueUrl") if isinstance(seen.json, dict) else None
        if isinstance(url, str) and url.strip("/"):
            seen.query = {**seen.query, "QueueName": url.rstrip("/").rsplit("/", 1)[-1]}
        return seen

    def validate(self, incoming: Incoming) -> tuple[int, str, str] | None:
        target = incoming.request.headers.get("X-Amz-Target")
        if incoming.request.path == "/" and target != "AmazonSQS.SendMessage":
            return (
                400,
                "InvalidAction",
                f"X-Amz-Target {target!r}: this queue takes AmazonSQS.SendMessage only",
            )
        return None

    def key_of(self, request: Request, body: Mapping[str, Any] | None) -> str | None:
        given = request.headers.get("MessageDeduplicationId") or None
        if (
            given is None
            and body is not None
            and isinstance(body.get("MessageDeduplicationId"), str)
        ):
            given = body["MessageDeduplicationId"] or None
        if given is not None or not self.options["content_based_dedup"] or body is None:
            return given
        text = body.get("body", body.get("MessageBody"))
        if not isinstance(text, str):
            return None
        return hashlib.sha256(text.encode()).hexdigest()

    def decide(self, incoming: Incoming) -> Reply:
        core = self.core
        attempt = incoming.attempt
        now = core.now()
        prior = core.log.find_acceptance(
            epoch=core.epoch, destination=incoming.destination, idempotency_key=incoming.key
        )
        if prior is not None and now - prior.effect.received_at < self.options["window_s"]:
            core.append(
                attempt,
                outcome="deduplicated",
                status=200,
                provider_message_id=prior.effect.provider_message_id,
                fault=incoming.fault_name,
                received_at=now,
            )
            return Reply(raw_json(200, prior.response_body))
        text = incoming.text
        message_id = str(uuid.UUID(core.mint_id(attempt, "", 16)))
        self._sequence += 1
        reply = {
            "MessageId": message_id,
            "MD5OfMessageBody": hashlib.md5(text.encode(), usedforsecurity=False).hexdigest(),
            "SequenceNumber": f"{int(now * 1000):014d}{self._sequence:06d}",
        }
        return core.record(
            attempt,
            outcome="fresh" if prior is None else "expired_then_accepted",
            status=200,
            payload=reply,
            fault=incoming.fault_name,
            provider_message_id=message_id,
            save=True,
            content=text,
        )

    def receive(self, request: Request) -> Reply:
        """POST /v1/queues/<queue>/receive: hand the oldest undelivered messages to a
        consumer (receive and delete in one step). Needs a credential scoped to the queue."""
        core = self.core
        queue = route_arg(request, "queue")
        credential = core.bearer_credential(request)
        if credential is None:
            return Reply(json_response(401, {"error": "unauthenticated"}))
        if not credential.allows(queue):
            return Reply(json_response(403, {"error": "destination out of scope"}))
        data = request.get_json(silent=True) if request.content_length else None
        limit = data.get("max", MAX_RECEIVE) if isinstance(data, dict) else MAX_RECEIVE
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECEIVE:
            return Reply(json_response(400, {"error": f"max must be 1..{MAX_RECEIVE}"}))
        with core.lock:
            messages = core.log.consume(
                epoch=core.epoch, destination=queue, limit=limit, at=core.now()
            )
        out = [
            {
                "MessageId": m.effect.provider_message_id,
                "Body": m.content,
                "MessageDeduplicationId": m.effect.idempotency_key,
                "Attributes": {"run_id": m.effect.run_id, "delivery_id": m.effect.delivery_id},
            }
            for m in messages
        ]
        return Reply(json_response(200, {"Messages": out}))

    def info(self) -> dict[str, Any]:
        return {"lookup": False}


def _build(core: Core, options: Mapping[str, Any]) -> QueueFifo:
    return QueueFifo(core, options)


SPEC = PresetSpec(
    name="queue-fifo",
    models="SQS FIFO-like queue (MessageDeduplicationId, no lookup)",
    options=(
        seconds("window_s", default=300, help="deduplication interval"),
        switch(
            "content_based_dedup", default=False, help="without an id, dedupe on the body's SHA-256"
        ),
    ),
    factory=_build,
    identify=Identify.of(
        run=["json:/run_id", "json:/MessageAttributes/run_id/StringValue", "header:X-Run-Id"],
        destination=["json:/destination", "query:QueueName"],
        delivery=[
            "json:/delivery_id",
            "json:/MessageAttributes/delivery_id/StringValue",
            "header:X-Delivery-Id",
        ],
        recognizer=["json:/recognizer", r"regex:ch-[0-9a-f]{12}"],
    ),
)
