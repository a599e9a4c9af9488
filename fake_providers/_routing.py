"""From a WSGI request to its handler, and from a reply back onto the wire.

Only this module knows werkzeug's URL map and the raw socket under a reply: the core
decides what a request gets, this finds who answers it and sends the answer, or cuts the
connection with no answer at all when a fault or a held reply asks for that.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Final
from wsgiref.types import StartResponse, WSGIEnvironment

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request

from fake_providers import _browse
from fake_providers._reply import Reply, json_response

MAX_BODY_BYTES: Final = 1 << 20

_ROUTE_ARGS: Final = "fake_providers.route_args"

Handler = Callable[[Request], Reply]


class SizedRequest(Request):
    """A request whose body may be at most ``MAX_BODY_BYTES`` (413 past that)."""

    max_content_length = MAX_BODY_BYTES


@dataclass(frozen=True)
class Route:
    """One URL rule a preset serves: werkzeug path, methods, handler."""

    path: str
    methods: tuple[str, ...]
    handler: Handler


def route_arg(request: Request, name: str) -> str:
    """A variable part of the matched URL rule (``<path:channel>`` -> ``channel``)."""
    args = request.environ.get(_ROUTE_ARGS) or {}
    return str(args.get(name, ""))


class Router:
    """The URL rules of one provider, matched in the order given."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self._handlers = {str(i): route.handler for i, route in enumerate(routes)}
        self._url_map = Map(
            [Rule(r.path, methods=list(r.methods), endpoint=str(i)) for i, r in enumerate(routes)]
        )

    def match(self, environ: WSGIEnvironment) -> Handler:
        """The handler of the rule the request matches (its URL variables noted for
        ``route_arg``); raises werkzeug's 404 or 405 if none does."""
        endpoint, args = self._url_map.bind_to_environ(environ).match()
        environ[_ROUTE_ARGS] = args
        return self._handlers[str(endpoint)]


def is_worker_path(environ: WSGIEnvironment) -> bool:
    """True unless the path is the admin API's or the browse page's."""
    return not str(environ.get("PATH_INFO", "")).startswith(("/_admin/", _browse.PATH))


def error_reply(exc: HTTPException) -> Reply:
    """werkzeug's routing or size error, answered as JSON."""
    code = exc.code or 500
    return Reply(json_response(code, {"error": exc.name.lower()}))


def send(reply: Reply, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """Answer with the reply, or for a drop cut the connection first."""
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
