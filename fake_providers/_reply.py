"""What a handler answers, and the few response shapes every answer takes.

The core, the admin API and every preset reply through these, so a JSON reply is the same
bytes (compact separators, one mimetype) whoever builds it, and a handler can ask for the
connection to be cut instead of answered without knowing how the server does that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from werkzeug.wrappers import Response


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
