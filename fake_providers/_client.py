"""``AdminClient``: what tests and the harness use to inspect and steer a running provider.

It speaks only the admin API (``/_admin/*``) and returns typed ``Effect`` records, so
callers count what the provider actually received instead of parsing JSON by hand.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import requests

from fake_providers._credentials import blank_secret
from fake_providers._errors import ProviderError
from fake_providers._records import ACCEPTED_OUTCOMES, Effect, FaultRule
from fake_providers._reply import REASON_HEADER

FilterValue = str | int | Sequence[str]


def _params(filters: dict[str, FilterValue]) -> list[tuple[str, str]]:
    """Query parameters; a sequence value becomes a repeated parameter (OR-ed)."""
    params: list[tuple[str, str]] = []
    for name, value in filters.items():
        if isinstance(value, str | int):
            params.append((name, str(value)))
        else:
            params.extend((name, str(v)) for v in value)
    return params


def forget_admin_tokens() -> None:
    """In a process forked from one that holds admin clients (a worker, before the system
    under test runs): every live ``AdminClient`` loses its token, and the token string's own
    characters are blanked in this process's memory, so whatever else refers to it (the
    ``ProviderProcess``, the harness's list of secrets) reads a blank too. The parent's
    clients are untouched (copy-on-write)."""
    for client in list(_LIVE):
        token = client._session.headers.pop("X-Admin-Token", None)
        if isinstance(token, str):
            blank_secret(token)


#: every AdminClient of this process (weakly): ``forget_admin_tokens`` clears them
_LIVE: weakref.WeakSet[AdminClient] = weakref.WeakSet()


class AdminClient:
    """Admin API of one provider at ``url``, authenticated with ``admin_token``."""

    def __init__(self, url: str, admin_token: str, *, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._timeout_s = timeout_s
        self._session = requests.Session()
        # A fake provider is on loopback: no proxy or .netrc applies, and not looking them
        # up in the environment on every call saves a harness a little on every case.
        self._session.trust_env = False
        self._session.headers["X-Admin-Token"] = admin_token
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"AdminClient({self.url!r})"

    def close(self) -> None:
        """Close the underlying HTTP session."""
        self._session.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: list[tuple[str, str]] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        timeout = self._timeout_s if timeout_s is None else timeout_s
        try:
            with self._session.request(
                method, self.url + path, json=json, params=params, timeout=timeout
            ) as response:
                if response.status_code != 200:
                    raise ProviderError(
                        f"{method} {path} -> {response.status_code}: {response.text.strip()}"
                    )
                return response.json()
        except requests.RequestException as exc:
            raise ProviderError(f"{method} {path} failed: {exc}") from exc

    def info(self) -> dict[str, Any]:
        """``{"preset", "models", "options", ...}``: what this provider is and how it is set."""
        result: dict[str, Any] = self._call("GET", "/_admin/info")
        return result

    def wait_in_flight(self, n: int = 1, *, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Block until at least ``n`` worker requests are between admission and reply (held
        by a ``slow`` or ``timeout`` fault, or being processed); return them.

        The server waits on a condition, so this never polls; raises ``ProviderError`` if
        fewer than ``n`` are in flight after ``timeout_s``.
        """
        params = [("min", str(n)), ("timeout_s", str(timeout_s))]
        data = self._call("GET", "/_admin/in_flight", params=params, timeout_s=timeout_s + 5)
        if not data["reached"]:
            raise ProviderError(
                f"expected {n} request(s) in flight within {timeout_s} s, "
                f"found {len(data['in_flight'])}"
            )
        flights: list[dict[str, Any]] = data["in_flight"]
        return flights

    def health(self) -> dict[str, Any]:
        """``{"ok": true, "epoch": N}``."""
        result: dict[str, Any] = self._call("GET", "/_admin/health")
        return result

    def audit(self, epoch: int | None = None) -> dict[str, Any]:
        """``{"epoch", "current_epoch", "records", "intact", "problems"}``: whether the log
        file still holds exactly what the provider wrote in ``epoch`` (default: the current
        one); ``problems`` names records deleted, rewritten or slipped in by anyone else."""
        params = None if epoch is None else [("epoch", str(epoch))]
        result: dict[str, Any] = self._call("GET", "/_admin/audit", params=params)
        return result

    def effects(self, **filters: FilterValue) -> list[Effect]:
        """Log records ordered by seq. Filters: epoch (int or "all"; default current),
        destination, run_id, delivery_id, idempotency_key, recognizer, outcome, credential_id,
        fault;
        a list value matches any of its items."""
        data = self._call("GET", "/_admin/effects", params=_params(filters))
        return [Effect.from_json(item) for item in data["effects"]]

    def accepted(self, **filters: FilterValue) -> list[Effect]:
        """Records that created an effect (outcome fresh or expired_then_accepted)."""
        if "outcome" in filters:
            raise TypeError("accepted() fixes the outcome filter; use effects(outcome=...)")
        return self.effects(**filters, outcome=list(ACCEPTED_OUTCOMES))

    def reasons(self, **filters: FilterValue) -> list[Effect]:
        """Records the provider had something to say about, in order: every refused or
        failed request (its reason: what was received, which rule refused it, for a near
        miss the field that differed) and every accepted one whose identity the rule could
        not read (``unattributed: ...``). Same filters as ``effects``. This is what a case
        note shows instead of a bare ``400 Client Error``."""
        return [e for e in self.effects(**filters) if e.reason is not None]

    def unattributed(self, **filters: FilterValue) -> list[Effect]:
        """Effects whose run or destination the identification rule could not read."""
        return [e for e in self.accepted(**filters) if e.unattributed]

    def count(self, **filters: FilterValue) -> int:
        """How many records match ``filters`` (same filters as ``effects``)."""
        return len(self.effects(**filters))

    def assert_effects(self, n: int, **filters: FilterValue) -> list[Effect]:
        """Assert exactly ``n`` effects match ``filters``; return them.

        An effect is what a person on the other end received: a record whose outcome created
        one (``fresh`` or ``expired_then_accepted``). A deduplicated, refused or failed
        request is a record but no effect; count those with ``assert_records``."""
        outcome = filters.get("outcome")
        if isinstance(outcome, int):
            raise TypeError(f"outcome is a name, got {outcome!r}")
        asked = [outcome] if isinstance(outcome, str) else list(outcome or [])
        if any(o not in ACCEPTED_OUTCOMES for o in asked):
            raise TypeError(
                f"assert_effects counts effects ({', '.join(ACCEPTED_OUTCOMES)}); outcome"
                f" {outcome!r} is a record that made none: use assert_records(n, outcome=...)"
            )
        found = self.effects(**{**filters, "outcome": asked or list(ACCEPTED_OUTCOMES)})
        return _exactly(n, found, filters, "effect")

    def assert_records(self, n: int, **filters: FilterValue) -> list[Effect]:
        """Assert exactly ``n`` log records (any outcome) match ``filters``; return them."""
        return _exactly(n, self.effects(**filters), filters, "record")

    def reset(self, faults: Sequence[FaultRule] = (), *, clock_path: str | None = None) -> int:
        """Start a new epoch with ``faults`` as its only fault rules (none by default);
        return its number. One request: the same as ``reset()`` then ``set_faults(...)``.

        ``clock_path`` makes the epoch's clock the reading of that clock file
        (``fake_providers._clock``): whoever moves the file moves the provider's clock too.
        """
        body: dict[str, Any] = {}
        if faults:
            body["rules"] = [rule.to_json() for rule in faults]
        if clock_path is not None:
            body["clock_path"] = clock_path
        epoch: int = self._call("POST", "/_admin/reset", json=body or None)["epoch"]
        return epoch

    def drain(
        self, epoch: int | None = None, *, timeout_s: float = 10.0, senders_gone: bool = False
    ) -> dict[str, Any]:
        """Wait until every worker request of ``epoch`` (default: the current one) has been
        answered or dropped, at most ``timeout_s``; return ``{"epoch", "drained",
        "waited_for", "waited_s", "in_flight"}`` (``drained`` false: it gave up).

        ``senders_gone``: no sender of the epoch is left, so replies held after processing
        (``timeout`` faults) go at once instead of at the end of their hold."""
        body: dict[str, Any] = {"timeout_s": timeout_s}
        if senders_gone:
            body["senders_gone"] = True
        if epoch is not None:
            body["epoch"] = epoch
        result: dict[str, Any] = self._call(
            "POST", "/_admin/drain", json=body, timeout_s=timeout_s + 5
        )
        return result

    def arm_hold(self, epoch: int, nth: int) -> None:
        """A far-side crash point: the ``nth`` request of ``epoch`` (the current one) whose
        effect the provider accepts and commits from now on gets no reply; it is held until
        its sender is gone or the epoch is over, then its connection is cut. Only accepted
        effects count (``fresh``, ``expired_then_accepted``). Replaces any armed hold."""
        self._call("POST", "/_admin/hold", json={"epoch": epoch, "nth": nth})

    def wait_held(self, epoch: int, *, timeout_s: float = 10.0) -> dict[str, Any]:
        """Wait (server side, no polling) until the hold armed for ``epoch`` holds a reply,
        is disarmed, or ``timeout_s`` passes; return ``{"armed", "holding", "epoch", "nth",
        "counted", "seq"}`` (``holding`` true: effect ``seq`` is committed, unanswered)."""
        params = [("epoch", str(epoch)), ("timeout_s", str(timeout_s))]
        result: dict[str, Any] = self._call(
            "GET", "/_admin/held", params=params, timeout_s=timeout_s + 5
        )
        return result

    def disarm_hold(self) -> dict[str, Any]:
        """No further request is held; return what the hold was (a reply already held stays
        unanswered). Wakes every ``wait_held``."""
        result: dict[str, Any] = self._call("DELETE", "/_admin/hold")
        return result

    def set_faults(self, rules: Sequence[FaultRule]) -> None:
        """Replace the fault rules (their match counters start from zero)."""
        self._call("POST", "/_admin/faults", json={"rules": [rule.to_json() for rule in rules]})

    def fault_stats(self) -> list[dict[str, Any]]:
        """The armed rules in order: ``{"rule", "matched", "fired"}`` each, this epoch."""
        rules: list[dict[str, Any]] = self._call("GET", "/_admin/faults")["rules"]
        return rules

    def clear_faults(self) -> None:
        """Remove every fault rule."""
        self._call("DELETE", "/_admin/faults")

    def advance_clock(self, seconds: float) -> float:
        """Move the provider clock forward; return the total offset in seconds."""
        offset: float = self._call("POST", "/_admin/clock", json={"advance_s": seconds})["offset_s"]
        return offset


def _exactly(n: int, found: list[Effect], filters: Mapping[str, Any], what: str) -> list[Effect]:
    if len(found) != n:
        shown = ", ".join(f"{k}={v!r}" for k, v in filters.items()) or "no filters"
        lines = [f"expected {n} {what}(s) matching {shown}, found {len(found)}:"]
        lines += [f"  {effect.describe()}" for effect in found] or ["  (none)"]
        raise AssertionError("\n".join(lines))
    return found


def reason_of(reply: Any) -> str | None:
    """The provider's reason in a reply (a ``requests.Response``, an ``HTTPError`` carrying
    one, or its decoded JSON body), or None: every fake provider puts ``"reason"`` in the
    body of a refusal, so a worker's ``400 Client Error`` can be told apart by cause; a wire
    whose errors are plain text (Slack's incoming webhooks) carries it in the
    ``X-Fake-Provider-Reason`` header instead."""
    response = getattr(reply, "response", None) if isinstance(reply, Exception) else reply
    headers = getattr(response, "headers", None)
    if headers is not None and headers.get(REASON_HEADER):
        return str(headers[REASON_HEADER])
    body: Any = response
    decode = getattr(response, "json", None)
    if callable(decode):
        try:
            body = decode()
        except ValueError:
            return None
    if isinstance(body, dict) and isinstance(body.get("reason"), str):
        return str(body["reason"])
    return None
