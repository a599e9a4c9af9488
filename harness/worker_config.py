"""What the supervisor hands a worker process: where the ledger and the provider are.

A forked worker receives this object in memory; an exec'd worker reads the same fields from
its environment (``to_env``). The credential secret is never part of ``repr`` or a report.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.clock import SharedClock
from harness.engine.plan.credentials import Credential, choose
from harness.engine.store._db import DatabaseTarget

ENV_VAR = "CRASH_HARNESS_WORKER"
SECRET_ENV_VAR = "CRASH_HARNESS_PROVIDER_SECRET"
#: the secrets of narrowed credentials, ``{credential_id: secret}`` as JSON (never in argv)
SECRETS_ENV_VAR = "CRASH_HARNESS_PROVIDER_SECRETS"
#: the URL of the case's Redis broker (``[broker]``), password and all: kept apart from the
#: public settings
BROKER_ENV_VAR = "CRASH_HARNESS_BROKER_URL"
#: per named provider: ``CRASH_HARNESS_PROVIDER_<NAME>_URL`` (and ``_SMTP_PORT``,
#: ``_PRESET``, ``_CREDENTIAL_ID``, ``_SECRET``), NAME upper-cased, ``-`` as ``_``
PROVIDER_ENV_PREFIX = "CRASH_HARNESS_PROVIDER_"


def provider_env_name(name: str) -> str:
    """A provider's name as it appears in its environment variables: ``queue-fifo`` ->
    ``QUEUE_FIFO`` (a scenario refuses two names that would collide here)."""
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


@dataclass(frozen=True)
class ProviderEndpoint:
    """One of the case's providers, as a worker reaches it: ``config.providers["mail"]``.

    Every provider of a campaign grants the same credentials; ``credential`` is the worker's
    default one (the same as ``WorkerConfig.credential_secret``), never printed."""

    name: str
    preset: str
    #: the provider's base URL for this case (its epoch in the path)
    url: str
    #: the SMTP port (preset ``smtp`` only)
    smtp_port: int | None = None
    credential_id: str = ""
    credential: str = field(default="", repr=False)

    def env(self) -> dict[str, str]:
        """This provider's environment variables for an exec'd worker."""
        stem = PROVIDER_ENV_PREFIX + provider_env_name(self.name)
        env = {
            f"{stem}_URL": self.url,
            f"{stem}_PRESET": self.preset,
            f"{stem}_CREDENTIAL_ID": self.credential_id,
            f"{stem}_SECRET": self.credential,
        }
        if self.smtp_port is not None:
            env[f"{stem}_SMTP_PORT"] = str(self.smtp_port)
        return env


@dataclass(frozen=True)
class WorkerConfig:
    """Settings of one worker incarnation."""

    db: DatabaseTarget
    provider_url: str
    credential_id: str
    credential_secret: str = field(repr=False)
    destination_scope: str
    worker_name: str
    #: how long a claim is exclusive; short so a restarted worker does not wait long
    lease_s: float = 30.0
    #: delay before attempt n+1 (the last value repeats)
    retry_backoff_s: tuple[float, ...] = (1.0, 2.0, 4.0)
    #: attempts before a delivery that keeps failing is marked failed
    max_attempts: int = 5
    #: the provider's dedupe window for a key; a retry past it must not resend
    key_window_s: float = 86_400.0
    #: a reply slower than this is an unknown outcome, not a failure
    request_timeout_s: float = 5.0
    #: the shared clock file (``harness.clock``); None means plain wall time
    clock_path: str | None = None
    #: when nothing is due, jump the shared clock to the next due time instead of sleeping
    #: (trio's MockClock autojump): runs are fast and their order does not depend on speed
    autojump: bool = False
    #: "sync": one loop claims and delivers; "asyncio": one task per due delivery, as a
    #: service that moved sending off its request path would do
    delivery_mode: str = "sync"
    #: how often the watchdog looks for overdue deliveries (wall seconds)
    watchdog_interval_s: float = 0.05
    #: how far past due (on the shared clock) a delivery must be to count as overdue
    liveness_grace_s: float = 1.0
    #: which provider API the worker speaks (``harness.reference.adapters``)
    provider_preset: str = "payments"
    #: the provider's SMTP port (preset ``smtp`` only)
    provider_smtp_port: int | None = None
    #: narrowed credentials, one per destination group (``harness.engine.plan.credentials``);
    #: empty: the
    #: one credential above (``credential_id``, scope ``destination_scope``) for everything
    credentials: tuple[Credential, ...] = ()
    #: the case's clock offset file (``[worker] fake_time``): an exec'd worker and the
    #: settle hooks tell the time by it; None: real wall time
    fake_time_file: str | None = None
    #: every provider of the case by name, in the scenario's order (the first is the one
    #: ``provider_url``/``provider_smtp_port`` name); empty for a config built by hand
    providers: Mapping[str, ProviderEndpoint] = field(default_factory=dict)
    #: the case this worker runs in (``crash@after_send.worker.42#1``; empty for a config
    #: built by hand): what ``{case.id}`` fills in a worker's templates
    case_id: str = ""
    #: the Redis broker the harness started for the campaign (``[broker]``), as a
    #: ``redis://`` URL with its password: what ``{broker.url}`` fills; None: no broker
    broker_url: str | None = field(default=None, repr=False)

    def provider(self, name: str) -> ProviderEndpoint:
        """The provider named ``name`` (``[provider.NAME]``), or a clear error naming the
        ones this case has."""
        try:
            return self.providers[name]
        except KeyError:
            known = ", ".join(self.providers) or "none (a config built by hand)"
            raise KeyError(f"no provider named {name!r} in this case; it has: {known}") from None

    def clock(self) -> SharedClock:
        return SharedClock(self.clock_path)

    @property
    def case_key(self) -> str:
        """Twelve hex digits naming this case (its database), the same in every process of
        every incarnation: a worker on a shared broker names its queue and keys with it, so
        cases never share messages, and a teardown hook finds what the case left."""
        import hashlib

        where = f"{self.db.url}|{self.db.schema or ''}"
        return hashlib.sha256(where.encode()).hexdigest()[:12]

    def credential_for(self, destination: str) -> Credential:
        """The credential to send to ``destination`` with: the narrowed one whose scope covers
        it; with none narrowed, the single credential. A destination no narrowed credential
        covers gets the first one (the provider refuses it, and the harness sees that)."""
        if not self.credentials:
            return Credential(self.credential_id, self.credential_secret, (self.destination_scope,))
        return choose(self.credentials, destination) or self.credentials[0]

    def backoff(self, attempt: int) -> float:
        """Delay after the ``attempt``-th attempt (1-based)."""
        return self.retry_backoff_s[min(attempt, len(self.retry_backoff_s)) - 1]

    def to_env(self) -> dict[str, str]:
        public = {
            "db_url": self.db.url,
            "db_schema": self.db.schema,
            "provider_url": self.provider_url,
            "credential_id": self.credential_id,
            "destination_scope": self.destination_scope,
            "worker_name": self.worker_name,
            "case_id": self.case_id,
            "lease_s": self.lease_s,
            "retry_backoff_s": list(self.retry_backoff_s),
            "max_attempts": self.max_attempts,
            "key_window_s": self.key_window_s,
            "request_timeout_s": self.request_timeout_s,
            "clock_path": self.clock_path,
            "autojump": self.autojump,
            "delivery_mode": self.delivery_mode,
            "watchdog_interval_s": self.watchdog_interval_s,
            "liveness_grace_s": self.liveness_grace_s,
            "provider_preset": self.provider_preset,
            "provider_smtp_port": self.provider_smtp_port,
            "credentials": [
                {"credential_id": c.credential_id, "scope": list(c.scope)} for c in self.credentials
            ],
            "providers": [
                {
                    "name": p.name,
                    "preset": p.preset,
                    "url": p.url,
                    "smtp_port": p.smtp_port,
                    "credential_id": p.credential_id,
                }
                for p in self.providers.values()
            ],
        }
        env = {ENV_VAR: json.dumps(public), SECRET_ENV_VAR: self.credential_secret}
        for endpoint in self.providers.values():
            env.update(endpoint.env())
        if self.broker_url is not None:
            env[BROKER_ENV_VAR] = self.broker_url
        if self.credentials:
            env[SECRETS_ENV_VAR] = json.dumps({c.credential_id: c.secret for c in self.credentials})
        if self.fake_time_file is not None:
            from harness.engine.process._faketime import environment

            env.update(environment(self.fake_time_file))
        return env

    @classmethod
    def from_env(cls) -> WorkerConfig:
        data = json.loads(os.environ[ENV_VAR])
        narrowed = data.get("credentials") or []
        secrets = json.loads(os.environ[SECRETS_ENV_VAR]) if narrowed else {}
        return cls(
            db=DatabaseTarget(url=data["db_url"], schema=data["db_schema"]),
            provider_url=data["provider_url"],
            credential_id=data["credential_id"],
            credential_secret=os.environ[SECRET_ENV_VAR],
            destination_scope=data["destination_scope"],
            worker_name=data["worker_name"],
            case_id=data.get("case_id", ""),
            lease_s=data["lease_s"],
            retry_backoff_s=tuple(data["retry_backoff_s"]),
            max_attempts=data["max_attempts"],
            key_window_s=data["key_window_s"],
            request_timeout_s=data["request_timeout_s"],
            clock_path=data.get("clock_path"),
            autojump=data.get("autojump", False),
            delivery_mode=data.get("delivery_mode", "sync"),
            watchdog_interval_s=data.get("watchdog_interval_s", 0.05),
            liveness_grace_s=data.get("liveness_grace_s", 1.0),
            provider_preset=data.get("provider_preset", "payments"),
            provider_smtp_port=data.get("provider_smtp_port"),
            broker_url=os.environ.get(BROKER_ENV_VAR),
            credentials=tuple(
                Credential(c["credential_id"], secrets[c["credential_id"]], tuple(c["scope"]))
                for c in narrowed
            ),
            providers={
                p["name"]: ProviderEndpoint(
                    name=p["name"],
                    preset=p["preset"],
                    url=p["url"],
                    smtp_port=p.get("smtp_port"),
                    credential_id=p.get("credential_id", ""),
                    credential=os.environ.get(
                        f"{PROVIDER_ENV_PREFIX}{provider_env_name(p['name'])}_SECRET",
                        os.environ[SECRET_ENV_VAR],
                    ),
                )
                for p in data.get("providers") or ()
            },
        )
