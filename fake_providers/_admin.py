"""The admin API (``/_admin/...``): what the harness reads from a provider and steers in it.

Kept apart from the worker side so the two never mix: every route here but ``health``
needs the admin token, none of them is logged as an effect, and none is fenced by the
epoch in the URL. The in-flight waits and the hold live with their state
(``fake_providers._flights``, ``fake_providers._holds``); this module lists them all and
serves the rest: the log, the epoch, the faults and the clock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from werkzeug.wrappers import Request

from fake_providers import _browse
from fake_providers._browse_gate import Browsed, BrowsePage
from fake_providers._clock import FileClock
from fake_providers._credentials import token_matches
from fake_providers._effect_log import FILTER_COLUMNS
from fake_providers._errors import ProviderError
from fake_providers._faults import Faults
from fake_providers._flights import Flights
from fake_providers._holds import Holds
from fake_providers._options import option_json
from fake_providers._provider_clock import ProviderClock
from fake_providers._records import FaultRule
from fake_providers._reply import Reply, json_response
from fake_providers._routing import Handler, Route


class Steered(Browsed, Protocol):
    """What the admin API reads and steers in a provider (``ProviderApp`` has it)."""

    @property
    def lock(self) -> threading.Lock: ...

    @property
    def epoch(self) -> int: ...

    @property
    def faults(self) -> Faults: ...

    @property
    def clock(self) -> ProviderClock: ...

    @property
    def flights(self) -> Flights: ...

    @property
    def holds(self) -> Holds: ...

    def now(self) -> float: ...

    def begin_epoch(
        self, rules: Sequence[FaultRule], clock: FileClock | None, clock_path: str | None
    ) -> int: ...


class AdminApi:
    """The admin routes of one provider, guarded by its admin token."""

    def __init__(self, app: Steered, token: str) -> None:
        self._app = app
        self._token = token
        self._browse = BrowsePage(app, token)

    def routes(self) -> list[Route]:
        """Every admin route, and the browse page."""
        app, guard = self._app, self._guard
        return [
            Route("/_admin/health", ("GET",), self._health),
            Route("/_admin/info", ("GET",), guard(self._info)),
            Route("/_admin/effects", ("GET",), guard(self._effects)),
            Route("/_admin/reset", ("POST",), guard(self._reset)),
            Route("/_admin/faults", ("POST",), guard(self._set_faults)),
            Route("/_admin/faults", ("DELETE",), guard(self._clear_faults)),
            Route("/_admin/faults", ("GET",), guard(self._fault_stats)),
            Route("/_admin/clock", ("POST",), guard(self._advance_clock)),
            Route("/_admin/in_flight", ("GET",), guard(app.flights.in_flight)),
            Route("/_admin/drain", ("POST",), guard(app.flights.drain)),
            Route("/_admin/audit", ("GET",), guard(self._audit)),
            Route("/_admin/hold", ("POST",), guard(app.holds.arm)),
            Route("/_admin/hold", ("DELETE",), guard(app.holds.disarm)),
            Route("/_admin/held", ("GET",), guard(app.holds.held)),
            Route(_browse.PATH, ("GET",), self._browse.serve),
        ]

    def _guard(self, handler: Handler) -> Handler:
        def guarded(request: Request) -> Reply:
            if not token_matches(self._token, request.headers.get("X-Admin-Token")):
                return Reply(json_response(401, {"error": "unauthenticated"}))
            return handler(request)

        return guarded

    # -- reading ------------------------------------------------------------------------

    def _health(self, _request: Request) -> Reply:
        epoch = self._app.current_epoch()
        return Reply(json_response(200, {"ok": True, "epoch": epoch}))

    def _info(self, _request: Request) -> Reply:
        app = self._app
        options = {k: option_json(v) for k, v in app.options.items()}
        info = {"preset": app.spec.name, "models": app.spec.models, "options": options}
        return Reply(json_response(200, {**info, **app.preset.info()}))

    def _effects(self, request: Request) -> Reply:
        filters: dict[str, list[str]] = {}
        epoch: int | None = self._app.current_epoch()
        for name in request.args:
            if name == "epoch":
                continue
            if name not in FILTER_COLUMNS:
                allowed = ", ".join(("epoch", *FILTER_COLUMNS))
                return Reply(
                    json_response(400, {"error": f"unknown filter {name!r}; allowed: {allowed}"})
                )
            filters[name] = [v for v in request.args.getlist(name) if v != ""]
        raw_epoch = request.args.get("epoch", "")
        if raw_epoch == "all":
            epoch = None
        elif raw_epoch != "":
            try:
                epoch = int(raw_epoch)
            except ValueError:
                return Reply(json_response(400, {"error": "epoch must be an integer or 'all'"}))
        effects = self._app.log.query(epoch=epoch, filters=filters)
        return Reply(json_response(200, {"effects": [e.to_json() for e in effects]}))

    def _audit(self, request: Request) -> Reply:
        """GET /_admin/audit?epoch=N: whether epoch N (default: the current one) in the log
        file still holds exactly what this provider wrote, and which epoch is current now."""
        current = self._app.current_epoch()
        raw = request.args.get("epoch", "")
        try:
            epoch = int(raw) if raw else current
        except ValueError:
            return Reply(json_response(400, {"error": "epoch must be an integer"}))
        found = self._app.log.audit(epoch)
        return Reply(
            json_response(
                200,
                {
                    "epoch": epoch,
                    "current_epoch": current,
                    "records": found.records,
                    "intact": found.intact,
                    "problems": list(found.problems),
                },
            )
        )

    # -- steering -----------------------------------------------------------------------

    def _reset(self, request: Request) -> Reply:
        """A new epoch; an optional ``{"rules": [...], "clock_path": PATH}`` body arms its
        faults at once and makes the epoch's clock the reading in that clock file."""
        rules: list[FaultRule] = []
        clock_path: str | None = None
        if request.content_length:
            data = request.get_json(silent=True)
            shape = 'expected no body or {"rules": [rule, ...], "clock_path": PATH}'
            if (
                not isinstance(data, dict)
                or not isinstance(data.get("rules", []), list)
                or set(data) - {"rules", "clock_path"}
                or not isinstance(data.get("clock_path", ""), str)
            ):
                return Reply(json_response(400, {"error": shape}))
            clock_path = data.get("clock_path") or None
            try:
                rules = [FaultRule.from_json(item) for item in data.get("rules", [])]
                clock = None if clock_path is None else FileClock(clock_path)
                if clock is not None:
                    clock.now()
            except ProviderError as exc:
                return Reply(json_response(400, {"error": str(exc)}))
            except (OSError, ValueError) as exc:
                return Reply(json_response(400, {"error": f"clock_path: {exc}"}))
        else:
            clock = None
        epoch = self._app.begin_epoch(rules, clock, clock_path)
        return Reply(json_response(200, {"epoch": epoch}))

    def _set_faults(self, request: Request) -> Reply:
        data = request.get_json(silent=True)
        if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
            return Reply(
                json_response(400, {"error": 'expected a JSON body {"rules": [rule, ...]}'})
            )
        try:
            rules = [FaultRule.from_json(item) for item in data["rules"]]
        except ProviderError as exc:
            return Reply(json_response(400, {"error": str(exc)}))
        with self._app.lock:
            self._app.faults.arm(rules)
        return Reply(json_response(200, {"rules": [rule.to_json() for rule in rules]}))

    def _fault_stats(self, _request: Request) -> Reply:
        """The armed rules in order, with how many requests each matched and was applied to."""
        with self._app.lock:
            stats = self._app.faults.stats()
        return Reply(json_response(200, {"epoch": self._app.epoch, "rules": stats}))

    def _clear_faults(self, _request: Request) -> Reply:
        with self._app.lock:
            self._app.faults.clear()
        return Reply(json_response(200, {"rules": []}))

    def _advance_clock(self, request: Request) -> Reply:
        data = request.get_json(silent=True)
        seconds = data.get("advance_s") if isinstance(data, dict) else None
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            return Reply(
                json_response(400, {"error": 'expected {"advance_s": <finite number >= 0>}'})
            )
        app = self._app
        with app.lock:
            if app.clock.file is not None:
                return Reply(
                    json_response(
                        409,
                        {
                            "error": "this epoch's clock follows a clock file; move the file",
                            "clock_path": app.clock.file.path,
                        },
                    )
                )
            app.clock.offset = app.log.advance_clock(float(seconds), at=time.time())
            now = app.now()
        return Reply(json_response(200, {"offset_s": app.clock.offset, "now": now}))
