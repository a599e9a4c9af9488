"""An exec'd worker's own settings, filled from templates: no glue module in the worker.

An unchanged worker reads its database URL and its providers' addresses from its own
environment variables or command line (``DATABASE_URL``, ``--webhook-url``). A scenario says
how to fill them (``[scenario] env = { DATABASE_URL = "{db.url}" }``, or the same
placeholders in the command string, ``cmd:python worker.py --db {db.path}``), and the harness
fills them in the forked child, just before it execs the program, from that worker's
``WorkerConfig``: the case's database and provider epochs, the worker's name.

Placeholders (``{{`` and ``}}`` are literal braces):

- ``{db.url}``: the case database's SQLAlchemy URL (PostgreSQL: with the case's schema as
  ``options=-csearch_path=...``; with a database per case, ``db_isolation = "database"``,
  that database's URL and no option), ``{db.path}``: the SQLite file, ``{db.schema}``: the
  PostgreSQL schema (``public`` in a database of the case's own), ``{db.dsn}``: a PostgreSQL
  case's libpq URL (``postgresql://...``, the schema in ``options``), which
  ``psycopg.connect``, ``asyncpg`` and ``psql`` take where they refuse SQLAlchemy's
  ``postgresql+psycopg://``;
- ``{provider.NAME.url}`` (the base URL, with the case's epoch in its path), ``.host``,
  ``.port``, ``.smtp_port`` (preset ``smtp``), ``.preset``, ``.credential_id``, and
  ``.credential``, the secret; ``{provider.url}`` and so on name the first provider;
- ``{worker.name}`` (``w1``, ``w2``, ...), ``{case.id}``, and ``{case.key}``: a name for the
  case safe for a queue, a job, a table or a key prefix (``c_`` then lower-case letters,
  digits and ``_``, at most 48 characters), the same for every worker of the case and
  different for every other case and every other run, so two runs sharing a broker never
  read each other's queue.

A secret is filled in only at exec time, so it is never part of a system's name, a report
or a replay line; it goes in an environment variable, never on the command line (every
process on the machine may read a command line).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from urllib.parse import quote, urlsplit

from harness.errors import BadInputError
from harness.worker_config import ProviderEndpoint, WorkerConfig

#: ``{name}``, or a literal ``{{`` / ``}}``
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
#: an environment variable a worker may be given (as a shell names them)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: what a provider placeholder may name, in the order the known list shows them
PROVIDER_FIELDS = ("url", "host", "port", "smtp_port", "preset", "credential_id", "credential")
#: the provider fields that are secrets: never on a command line, never printed
SECRET_FIELDS = frozenset({"credential"})
_PLAIN = (
    "db.url",
    "db.path",
    "db.schema",
    "db.dsn",
    "worker.name",
    "case.id",
    "case.key",
    "broker.url",
)
#: the harness's own variables, which a template must not replace
_OWN_PREFIX = "CRASH_HARNESS_"


class TemplateError(BadInputError):
    """A template names a placeholder the harness does not fill, or puts a secret where it
    would be seen."""


def known(providers: Sequence[str]) -> list[str]:
    """Every placeholder a scenario with these provider names may use, in a stable order."""
    names = list(_PLAIN)
    names += [f"provider.{f}" for f in PROVIDER_FIELDS]
    names += [f"provider.{p}.{f}" for p in providers for f in PROVIDER_FIELDS]
    return names


def placeholders(template: str) -> list[str]:
    """The placeholders ``template`` names, in order (a lone ``{`` or ``}`` is an error)."""
    found = []
    for match in _TOKEN.finditer(template):
        token = match.group(0)
        if token in ("{{", "}}"):
            continue
        if match.group(1) is None:
            raise TemplateError(
                f"{template!r}: a lone {token!r}; write {token * 2!r} for a literal brace"
            )
        found.append(match.group(1))
    return found


def _is_secret(name: str) -> bool:
    if name == "broker.url":  # it carries the broker's password
        return True
    return name.startswith("provider.") and name.rsplit(".", 1)[-1] in SECRET_FIELDS


def check(
    template: str, providers: Sequence[str] | None, *, where: str, secret_ok: bool = True
) -> None:
    """Refuse a placeholder nobody fills (``providers`` None: a provider's name is not
    checked) and, where ``secret_ok`` is false (a command line), a secret.

    ``where`` starts the message (the file and key, or the option)."""
    try:
        names = placeholders(template)
    except TemplateError as exc:
        raise TemplateError(f"{where}: {exc}") from None
    allowed = set(known(providers or ()))
    for name in names:
        parts = name.split(".")
        generic = (
            providers is None
            and len(parts) == 3
            and parts[0] == "provider"
            and parts[2] in PROVIDER_FIELDS
        )
        if name not in allowed and not generic:
            shown = ", ".join("{" + k + "}" for k in known(providers or ()))
            if providers is None:
                shown += ", {provider.NAME.FIELD}"
            raise TemplateError(
                f"{where}: unknown placeholder {{{name}}}; known placeholders: {shown}"
                " ({{ and }} are literal braces)"
            )
        if not secret_ok and _is_secret(name):
            raise TemplateError(
                f"{where}: {{{name}}} is a secret and the command line is readable by every"
                " process on the machine; pass it in an environment variable (env ="
                ' { TOKEN = "{' + name + '}" }, or TOKEN={' + name + "} before the command)"
            )


def check_env_name(name: str, *, where: str) -> None:
    """An environment variable name a template may set: a shell name, not the harness's."""
    if not ENV_NAME.fullmatch(name):
        raise TemplateError(
            f"{where}: {name!r} is not an environment variable name (letters, digits and _,"
            " not starting with a digit)"
        )
    if name.startswith(_OWN_PREFIX):
        raise TemplateError(
            f"{where}: {name} is the harness's own (every {_OWN_PREFIX}* variable is); name"
            " your worker's variable"
        )


def _endpoint(config: WorkerConfig, name: str | None) -> ProviderEndpoint:
    if name is None:
        if config.providers:
            return next(iter(config.providers.values()))
        return ProviderEndpoint(  # a config built by hand: its one provider
            name=config.provider_preset,
            preset=config.provider_preset,
            url=config.provider_url,
            smtp_port=config.provider_smtp_port,
            credential_id=config.credential_id,
            credential=config.credential_secret,
        )
    return config.provider(name)


def _db_url(config: WorkerConfig) -> str:
    url = config.db.url
    if config.db.schema is None:
        return url
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}options={quote('-csearch_path=' + config.db.schema, safe='')}"


def _dsn(config: WorkerConfig) -> str:
    """A PostgreSQL case's libpq URL: SQLAlchemy's without its driver, the password kept (it
    goes only into the worker's environment), the case's schema as ``options``."""
    if config.db.kind == "sqlite":
        raise TemplateError(
            "{db.dsn} is a PostgreSQL URL and this case's database is SQLite;"
            " use {db.path} or {db.url}"
        )
    from sqlalchemy.engine import make_url

    url = make_url(config.db.url).set(drivername="postgresql")
    plain = url.render_as_string(hide_password=False)
    if config.db.schema is None:
        return plain
    joiner = "&" if "?" in plain else "?"
    return f"{plain}{joiner}options={quote('-csearch_path=' + config.db.schema, safe='')}"


def case_key(config: WorkerConfig) -> str:
    """``{case.key}``: the case id made fit for a queue or table name, and made this run's own
    by a digest of the case's database (a file in this run's work dir, this run's schema or
    this run's database), which no other run shares."""
    slug = re.sub(r"[^a-z0-9]+", "_", config.case_id.lower()).strip("_")[:32]
    where = f"{config.case_id}\0{config.db.url}\0{config.db.schema or ''}"
    digest = hashlib.sha256(where.encode()).hexdigest()[:12]
    return f"c_{slug}_{digest}" if slug else f"c_{digest}"


def value(name: str, config: WorkerConfig) -> str:
    """What placeholder ``name`` means for this worker (a ``TemplateError`` when this case
    cannot fill it: ``{db.path}`` of a PostgreSQL case, an SMTP port of an HTTP provider)."""
    if name == "db.url":
        return _db_url(config)
    if name == "db.path":
        if config.db.kind != "sqlite":
            raise TemplateError(
                "{db.path} is a SQLite file and this case's database is PostgreSQL; use {db.url}"
            )
        from sqlalchemy.engine import make_url

        return make_url(config.db.url).database or ""
    if name == "db.schema":
        if config.db.schema is None and config.db.kind == "postgresql":
            return "public"  # a database of the case's own: its tables are in public
        if config.db.schema is None:
            raise TemplateError(
                "{db.schema} is a PostgreSQL schema; this case's database is SQLite"
            )
        return config.db.schema
    if name == "worker.name":
        return config.worker_name
    if name == "case.id":
        return config.case_id
    if name == "case.key":
        return case_key(config)
    if name == "db.dsn":
        return _dsn(config)
    if name == "broker.url":
        if config.broker_url is None:
            raise TemplateError(
                "{broker.url} is the Redis broker the harness starts for a scenario with a"
                ' [broker] table (persistence = "none" or "aof"); this one has none'
            )
        return config.broker_url
    parts = name.split(".")
    if parts[0] == "provider" and len(parts) in (2, 3) and parts[-1] in PROVIDER_FIELDS:
        endpoint = _endpoint(config, parts[1] if len(parts) == 3 else None)
        field = parts[-1]
        if field in ("host", "port"):
            split = urlsplit(endpoint.url)
            return str(split.hostname if field == "host" else split.port)
        if field == "smtp_port":
            if endpoint.smtp_port is None:
                raise TemplateError(
                    f"{{{name}}}: provider {endpoint.name!r} (preset {endpoint.preset}) has no"
                    " SMTP port; only preset smtp does"
                )
            return str(endpoint.smtp_port)
        return str(getattr(endpoint, field))
    raise TemplateError(f"unknown placeholder {{{name}}}; known: {', '.join(known([]))}")


def render(template: str, config: WorkerConfig) -> str:
    """``template`` with every placeholder filled from ``config`` (secrets included: call it
    only where the result goes straight into the program's environment or argv)."""

    def fill(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        if match.group(1) is None:
            raise TemplateError(f"{template!r}: a lone {token!r}")
        return value(match.group(1), config)

    return _TOKEN.sub(fill, template)


def _quote(word: str) -> str:
    """``word`` as a shell would take it back, quoted only where it must be (a placeholder's
    braces need no quotes: ``DATABASE_URL={db.url}`` reads better than its quoted form)."""
    return word if re.fullmatch(r"[\w@%+=:,./{}-]+", word) else shlex.quote(word)


class CommandTemplate:
    """A program's command line and environment, as templates: ``NAME=VALUE`` words before
    the program (as a shell takes them) and ``env`` given apart are its environment, the
    rest its argv (``python`` first means the harness's own interpreter)."""

    def __init__(self, command: str, env: Mapping[str, str] | None = None) -> None:
        words = shlex.split(command)
        assignments: dict[str, str] = {}
        while words and "=" in words[0] and ENV_NAME.fullmatch(words[0].split("=", 1)[0]):
            name, _, template = words.pop(0).partition("=")
            assignments[name] = template
        self.argv = words
        given = dict(env or {})
        twice = sorted(set(assignments) & set(given))
        if twice:
            raise TemplateError(
                f"{twice[0]} is set both before the command and in its env; set it once"
            )
        #: the variables given apart from the command (written before it in ``name``)
        self.given_env = given
        self.env = {**assignments, **given}
        self.command = command

    def check(self, providers: Sequence[str] | None, *, where: str) -> None:
        """Every template of this command is one the harness can fill (see ``check``)."""
        for name, template in self.env.items():
            check_env_name(name, where=where)
            check(template, providers, where=f"{where} {name}")
        for word in self.argv:
            check(word, providers, where=where, secret_ok=False)

    def uses_placeholders(self) -> bool:
        """Whether any argument names a placeholder (the environment always counts)."""
        return any(placeholders(word) for word in self.argv)

    def check_campaign(
        self, *, database: str, providers: Sequence[str], broker: bool = False
    ) -> None:
        """Before any case runs: every placeholder names a provider this campaign has, and
        none asks for what its database is not (``{db.path}`` of PostgreSQL, ``{db.schema}``
        of SQLite), nor for a broker it has none of (``{broker.url}`` without ``[broker]``)."""
        where = f"--system cmd:{self.name}"
        self.check(providers, where=where)
        if not broker and any(
            "broker.url" in placeholders(t) for t in [*self.env.values(), *self.argv]
        ):
            raise TemplateError(
                f"{where}: {{broker.url}} is the Redis broker the harness starts for a scenario"
                ' with a [broker] table (persistence = "none" or "aof"); this one has none'
            )
        wrong = {"postgresql": ("db.path",), "sqlite": ("db.schema", "db.dsn")}[database]
        what = {
            "db.path": "SQLite file",
            "db.schema": "PostgreSQL schema",
            "db.dsn": "PostgreSQL URL",
        }
        for template in [*self.env.values(), *self.argv]:
            for name in wrong:
                if name in placeholders(template):
                    raise TemplateError(
                        f"{where}: {{{name}}} is a {what[name]}, and this campaign's database is"
                        f" {'PostgreSQL' if database == 'postgresql' else 'SQLite'}; use {{db.url}}"
                    )

    @property
    def name(self) -> str:
        """The command with its environment written before it: the whole system, so a
        replay line or a resumed report rebuilds it from the name alone (templates only,
        never a filled-in secret)."""
        given = [f"{k}={_quote(v)}" for k, v in self.given_env.items()]
        if not given:
            return self.command
        return " ".join([*given, self.command])

    def environment(self, config: WorkerConfig) -> dict[str, str]:
        """The program's own variables, filled in for this worker."""
        return {name: render(template, config) for name, template in self.env.items()}

    def arguments(self, config: WorkerConfig) -> list[str]:
        """The program's argv, filled in for this worker."""
        return [render(word, config) for word in self.argv]
