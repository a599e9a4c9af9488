"""Who may see the browse page, and serving it to them.

The page shows every request as received, so it needs the admin token like the admin API;
but a person opens it in a browser, where no header can be set. The token is therefore
taken once in the URL, traded for a cookie scoped to the page, and taken off the URL at
once (a redirect), unless the runner opened the page on loopback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol
from urllib.parse import urlencode

from werkzeug.wrappers import Request, Response

from fake_providers import _browse
from fake_providers._credentials import token_matches
from fake_providers._effect_log import EffectLog
from fake_providers._preset import Preset, PresetSpec
from fake_providers._reply import Reply, html_response, json_response

_HEADERS: Final = {
    "Content-Security-Policy": _browse.CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Browsed(Protocol):
    """What the browse page shows of a provider (``ProviderApp`` has it)."""

    @property
    def browse_open(self) -> bool:
        """The page is served without the admin token (loopback only)."""
        ...

    @property
    def spec(self) -> PresetSpec: ...

    @property
    def options(self) -> Mapping[str, Any]: ...

    @property
    def preset(self) -> Preset: ...

    @property
    def log(self) -> EffectLog: ...

    def current_epoch(self) -> int: ...


class BrowsePage:
    """``GET /_browse`` of one provider."""

    def __init__(self, app: Browsed, token: str) -> None:
        self._app = app
        self._token = token

    def serve(self, request: Request) -> Reply:
        """GET /_browse[?epoch=N|all]: the browse page (HTML). Needs the admin token (the
        ``X-Admin-Token`` header, or once as ``?token=``, which sets a cookie and redirects
        to the same page without it) unless the page is open."""
        if not self._app.browse_open:
            refused = self._login(request)
            if refused is not None:
                return refused
        app = self._app
        current = app.current_epoch()
        raw_epoch = request.args.get("epoch", "")
        shown: int | None = current
        if raw_epoch == "all":
            shown = None
        elif raw_epoch:
            try:
                shown = int(raw_epoch)
            except ValueError:
                return Reply(json_response(400, {"error": "epoch must be an integer or 'all'"}))
        page = _browse.render_page(
            preset=app.spec.name,
            models=app.spec.models,
            options={**app.options, "identify": getattr(app.preset, "identify", None)},
            current_epoch=current,
            shown_epoch=shown,
            records=app.log.everything(epoch=shown),
        )
        return Reply(html_response(200, page, _HEADERS))

    def _login(self, request: Request) -> Reply | None:
        """The reply that stands in for the page (the login form, or the redirect that
        trades a ``?token=`` for the cookie), or None: the caller may see it."""
        given = request.args.get("token")
        if given is not None:
            if not token_matches(self._token, given):
                return Reply(html_response(401, _browse.login_page(), _HEADERS))
            rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
            target = _browse.PATH + ("?" + urlencode(rest) if rest else "")
            response = Response(status=303, headers={**_HEADERS, "Location": target})
            response.set_cookie(
                _browse.COOKIE,
                _browse.cookie_value(self._token),
                path=_browse.PATH,
                httponly=True,
                samesite="Strict",
            )
            return Reply(response)
        by_header = token_matches(self._token, request.headers.get("X-Admin-Token"))
        by_cookie = token_matches(
            _browse.cookie_value(self._token), request.cookies.get(_browse.COOKIE)
        )
        if not (by_header or by_cookie):
            return Reply(html_response(401, _browse.login_page(), _HEADERS))
        return None
