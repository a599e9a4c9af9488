"""What a handler answers, and the few response shapes every answer takes.

The core, the admin API and every preset reply through these, so a JSON reply is the same
bytes (compact separators, one mimetype) whoever builds it, and a handler can ask for the
connection to be cut instead of answered without knowing how the server does that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from werkzeug.wrappers import Response

REASON_HEADER: Final = "X-Fake-Provider-Reason"
"""Where a plain-text refusal (Slack's incoming webhooks answer ``invalid_token``, nothing
more) carries the provider's reason, the body staying exactly what the real provider sends."""


class Reply(NamedTuple):
    """What a handler produced: a response, or (``drop``) a connection to cut instead."""

    response: Response
    drop: bool = False


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


def html_response(status: int, page: str, headers: Mapping[str, str]) -> Response:
    """An HTML page (the browse page and its login form)."""
    return Response(page, status=status, headers=dict(headers), mimetype="text/html")


def plain_text(status: int, body: str, reason: str | None = None) -> Response:
    """A ``text/plain`` reply (Slack's incoming webhooks: ``ok``, or the error string), the
    reason, if any, in ``REASON_HEADER`` (one line of ASCII: a header can carry no more)."""
    headers: dict[str, str] = {}
    if reason:
        flat = " ".join(reason.split())
        headers[REASON_HEADER] = flat.encode("ascii", "backslashreplace").decode("ascii")
    return Response(body, status=status, headers=headers, mimetype="text/plain")
