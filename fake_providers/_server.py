"""Serve the app over HTTP on loopback with werkzeug's threaded server, tuned for tests.

Two stdlib defaults get in the way of a fake provider: Nagle's algorithm (http.server
writes headers and body in separate sends, so each reply can stall ~40 ms on delayed ACKs)
and one access-log line per request on stderr. The handler below fixes both. Binding is
restricted to loopback because the provider accepts anything a test tells it to.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from fake_providers._app import ProviderApp
from fake_providers._errors import ProviderError


class QuietNoDelayHandler(WSGIRequestHandler):
    """A request handler with TCP_NODELAY on and per-request access logging off."""

    def setup(self) -> None:
        super().setup()
        # Unix sockets (and some exotic transports) have no Nagle to disable.
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Access logging is off: the effect log is the record of what arrived."""


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1 (literal addresses, no DNS)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str, *, allow_non_loopback: bool = False) -> None:
    """Raise ``ProviderError`` unless ``host`` is loopback or non-loopback was allowed."""
    if allow_non_loopback or is_loopback(host):
        return
    raise ProviderError(
        f"refusing to bind the fake provider to {host!r}: it is not a loopback address "
        "(127.0.0.0/8, ::1 or localhost) and the fake accepts whatever tests tell it to. "
        "Pass --allow-non-loopback (crash-harness providers serve) or allow_non_loopback=True"
        " if you really mean it."
    )


def build_server(
    app: ProviderApp, *, host: str, port: int, allow_non_loopback: bool = False
) -> BaseWSGIServer:
    """Bind (and listen) now; the caller runs ``serve_forever``."""
    check_host(host, allow_non_loopback=allow_non_loopback)
    return make_server(
        host.strip("[]"), port, app, threaded=True, request_handler=QuietNoDelayHandler
    )


def server_url(server: BaseWSGIServer) -> str:
    """The base URL clients should use, with the port actually bound."""
    address: Any = server.server_address
    host, port = str(address[0]), int(address[1])
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"
