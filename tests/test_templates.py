"""A program that reads only its own settings (``DATABASE_URL``, ``WEBHOOK_URL``) gets them
from the scenario's templates, filled at exec time; a placeholder nobody fills is refused
before anything runs, naming the file, the key and the known placeholders; the secret a
template asks for reaches the worker and nothing the harness writes or prints."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests._cli import harness_proc

#: a worker that knows nothing of the harness: its database and its receiver from its env
#: (and the token, which it may not print); what it was given goes to SEEN, outside the
#: harness's work dir and reports, so the test can tell what was filled in
WORKER = """
import json, os, sys
import requests
from sqlalchemy import create_engine, text

db = create_engine(os.environ["DATABASE_URL"])
with db.connect() as c:
    work = c.execute(text(
        "SELECT r.run_id, d.destination FROM run_requests r JOIN roster d ON d.topic = r.topic"
    )).all()
for run_id, destination in work:
    reply = requests.post(
        os.environ["WEBHOOK_URL"],
        json={"destination": destination, "run_id": run_id},
        headers={
            "Authorization": "Bearer " + os.environ["TOKEN"],
            "webhook-id": run_id + destination,
        },
        timeout=5,
    )
    reply.raise_for_status()
seen = {k: os.environ.get(k) for k in ("DATABASE_URL", "WEBHOOK_URL", "TOKEN", "WHO", "CASE")}
seen["argv"] = sys.argv[1:]
with open(os.environ["SEEN"], "w") as out:
    json.dump(seen, out)
"""

SCENARIO = """
[scenario]
system = "cmd:python worker.py --case {{case.id}} --literal {{{{x}}}}"
env = {{ {env} }}
seed = 3
[workload]
runs = 2
destinations_per_topic = 1
[provider.hooks]
preset = "webhook"
faults = []
[cases]
mode = "list"
list = ["baseline"]
"""

#: the worker's own variables: its settings, and where it tells the test what it got
ENV = ", ".join(
    [
        'DATABASE_URL = "{db.url}"',
        'WEBHOOK_URL = "{provider.hooks.url}/hooks/orders"',
        'TOKEN = "{provider.credential}"',
        'WHO = "{worker.name}"',
        'CASE = "{case.id}"',
        'SEEN = "{seen}"',
    ]
)


def _harness(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return harness_proc(tmp_path, tmp_path, *args, timeout=300)


def _files_under(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*") if p.is_file()]


def test_an_execd_worker_reads_only_its_own_variables(tmp_path: Path) -> None:
    """The worker reads DATABASE_URL and WEBHOOK_URL, nothing of the harness, and is judged:
    its posts reached the case's receiver (epoch and all) with the token the template asked
    for, and the worker's name and the case id were filled; the secret is nowhere in the
    reports, the kept work dir, or what the harness printed."""
    seen_path = tmp_path / "seen.json"
    (tmp_path / "worker.py").write_text(WORKER)
    (tmp_path / "s.toml").write_text(SCENARIO.format(env=ENV.replace("{seen}", str(seen_path))))
    proc = _harness(
        tmp_path, "run", "s.toml", "--keep-workdir", "--report-dir", str(tmp_path / "r")
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    seen = json.loads(seen_path.read_text())
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    (case,) = report["cases"]
    assert case["verdict"] == "pass", case
    assert seen["DATABASE_URL"].startswith(("sqlite:///", "postgresql")), seen
    assert "/epoch/" in seen["WEBHOOK_URL"], seen
    assert seen["WEBHOOK_URL"].endswith("/hooks/orders"), seen
    assert seen["WHO"] == "w1"
    assert seen["CASE"] == "baseline"
    assert seen["argv"] == ["--case", "baseline", "--literal", "{x}"]
    secret = seen["TOKEN"]
    assert len(secret) >= 16, "the worker got the provider's credential"
    # what the system is called everywhere is its templates, never the filled-in secret
    assert "TOKEN={provider.credential}" in said
    kept = [
        Path(line.split(":", 1)[1].strip()) for line in said.splitlines() if "work dir kept" in line
    ]
    assert kept, said
    leaked = [
        str(p) for p in _files_under(tmp_path / "r", *kept) if secret.encode() in p.read_bytes()
    ]
    assert secret not in said
    assert not leaked, leaked


def test_a_placeholder_nobody_fills_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """A typo in a template is bad input at ``scenarios check``: exit 2, naming the file and
    line, the table and key, the variable, and every placeholder this scenario may use."""
    bad = SCENARIO.format(env=ENV.replace("{seen}", "x")).replace("{db.url}", "{db.uri}")
    (tmp_path / "bad.toml").write_text(bad)
    proc = _harness(tmp_path, "scenarios", "check", "bad.toml")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert "bad.toml:4: [scenario.env] DATABASE_URL: unknown placeholder {db.uri}" in said, said
    for known in ("{db.url}", "{provider.hooks.url}", "{case.id}"):
        assert known in said, said


@pytest.mark.parametrize(
    ("system", "env", "expected"),
    [
        ("cmd:python worker.py --to {provider.nope.url}", "", "unknown placeholder"),
        ("cmd:python worker.py --token {provider.credential}", "", "is a secret"),
        ("cmd:python worker.py {", "", "a lone '{'"),
        ("cmd:python worker.py", "env = { CRASH_HARNESS_WORKER = '{db.url}' }", "harness's own"),
        ("cmd:python worker.py", "env = { 1X = '{db.url}' }", "not an environment variable"),
        ("reference", "env = { X = '{db.url}' }", "only a cmd: system"),
    ],
)
def test_bad_templates_are_refused_naming_the_key(
    tmp_path: Path, system: str, env: str, expected: str
) -> None:
    """Every way a template can be wrong is one line at ``scenarios check``, exit 2."""
    text = f'[scenario]\nsystem = "{system}"\n{env}\n[provider.hooks]\npreset = "webhook"\n'
    (tmp_path / "bad.toml").write_text(text)
    proc = _harness(tmp_path, "scenarios", "check", "bad.toml")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert expected in said, said
    assert "bad.toml:" in said, said


def test_the_command_line_route_takes_templates_too() -> None:
    """``--system-cmd 'DATABASE_URL={db.url} python worker.py'`` is the same system: the
    assignments are its environment, its name keeps the templates (replay lines restate it),
    and a wrong placeholder is refused by name."""
    from harness.errors import BadInputError
    from harness.systems import resolve

    system = resolve("cmd:DATABASE_URL={db.url} WEBHOOK_URL={provider.url}/hooks python w.py")
    assert system.name == "cmd:DATABASE_URL={db.url} WEBHOOK_URL={provider.url}/hooks python w.py"
    with pytest.raises(BadInputError, match=r"unknown placeholder \{db\.uri\}.*\{db\.url\}"):
        resolve("cmd:DATABASE_URL={db.uri} python w.py")


def test_templates_fill_from_a_workers_config() -> None:
    """What each placeholder means, on a config built by hand: the PostgreSQL URL carries
    the case's schema, {db.path} of a PostgreSQL case and an SMTP port of an HTTP provider
    are refused by name."""
    from harness.engine.plan._worker_env import TemplateError, render
    from harness.engine.store._db import DatabaseTarget
    from harness.worker_config import ProviderEndpoint, WorkerConfig

    hooks = ProviderEndpoint("hooks", "webhook", "http://127.0.0.1:4100/epoch/3", None, "c1", "s3")
    mail = ProviderEndpoint("mail", "smtp", "http://127.0.0.1:4200/epoch/5", 2525, "c1", "s3")
    sqlite = WorkerConfig(
        db=DatabaseTarget("sqlite:////tmp/case.sqlite"),
        provider_url=hooks.url,
        credential_id="c1",
        credential_secret="s3",
        destination_scope="*",
        worker_name="w2",
        providers={"hooks": hooks, "mail": mail},
        case_id="crash@after_send.worker.9#1",
    )
    assert render("{db.path}|{worker.name}|{case.id}", sqlite) == (
        "/tmp/case.sqlite|w2|crash@after_send.worker.9#1"
    )
    assert render("{provider.url}/x {provider.mail.smtp_port} {provider.host}", sqlite) == (
        "http://127.0.0.1:4100/epoch/3/x 2525 127.0.0.1"
    )
    assert render("{provider.port}:{provider.mail.credential}", sqlite) == "4100:s3"
    with pytest.raises(TemplateError, match="no SMTP port"):
        render("{provider.smtp_port}", sqlite)
    pg = WorkerConfig(
        db=DatabaseTarget("postgresql+psycopg://u@h/db", schema="ch_case1"),
        provider_url=hooks.url,
        credential_id="c1",
        credential_secret="s3",
        destination_scope="*",
        worker_name="w1",
    )
    assert render("{db.url}", pg) == (
        "postgresql+psycopg://u@h/db?options=-csearch_path%3Dch_case1"
    )
    assert render("{db.schema}", pg) == "ch_case1"
    with pytest.raises(TemplateError, match=r"PostgreSQL; use \{db\.url\}"):
        render("{db.path}", pg)


def _config(url: str, *, schema: str | None = None, case_id: str = "baseline") -> Any:
    from harness.engine.store._db import DatabaseTarget
    from harness.worker_config import WorkerConfig

    return WorkerConfig(
        db=DatabaseTarget(url, schema=schema),
        provider_url="http://127.0.0.1:4100/epoch/3",
        credential_id="c1",
        credential_secret="s3",
        destination_scope="*",
        worker_name="w1",
        case_id=case_id,
    )


def test_a_libpq_url_for_the_drivers_that_refuse_sqlalchemys() -> None:
    """{db.dsn}: the case's PostgreSQL database as psycopg and psql take it (no driver name,
    the schema in options, the password kept); a SQLite case cannot fill it."""
    from harness.engine.plan._worker_env import TemplateError, render

    pg = _config("postgresql+psycopg://u:pw@h:5433/db", schema="ch_case1")
    assert render("{db.dsn}", pg) == "postgresql://u:pw@h:5433/db?options=-csearch_path%3Dch_case1"
    with pytest.raises(TemplateError, match=r"SQLite; use \{db\.path\} or \{db\.url\}"):
        render("{db.dsn}", _config("sqlite:////tmp/case.sqlite"))


def test_a_case_key_names_a_queue_no_other_case_or_run_shares() -> None:
    """{case.key}: fit for a queue, job or table name; the same for every worker of a case,
    another for another case, and another for the same case of another run (its own file)."""
    from harness.engine.plan._worker_env import render

    case = "crash@after_send.worker.9#1+pause_past_lease@after_claim#2"
    one = _config("sqlite:////tmp/run1/case.sqlite", case_id=case)
    key = render("{case.key}", one)
    assert re.fullmatch(r"c_[a-z0-9_]{1,46}", key), key
    assert key.startswith("c_crash_after_send_worker_9_1_pau"), key
    assert render("{case.key}", _config("sqlite:////tmp/run1/case.sqlite", case_id=case)) == key
    assert render("{case.key}", _config("sqlite:////tmp/run2/case.sqlite", case_id=case)) != key
    assert render("{case.key}", _config("sqlite:////tmp/run1/case.sqlite")) != key


@pytest.mark.postgres
def test_psycopg_connects_with_the_libpq_url_into_the_cases_schema() -> None:
    """The real driver, the real server: psycopg refuses SQLAlchemy's URL and takes
    {db.dsn}, landing in the case's schema."""
    import uuid

    import psycopg
    from sqlalchemy import text

    from harness.engine.plan._worker_env import render
    from harness.engine.store._db import normalise_url, open_engine
    from tests.conftest import _pg_url

    url = _pg_url()
    if url is None:
        pytest.skip("set CRASH_HARNESS_PG_URL to test PostgreSQL")
    schema = f"ch_dsn_{uuid.uuid4().hex[:12]}"
    engine = open_engine(url)
    try:
        with engine.begin() as c:
            c.execute(text(f"CREATE SCHEMA {schema}"))
        # the URL as the harness hands it to a case: SQLAlchemy's, naming its driver
        config = _config(normalise_url(url), schema=schema)
        with pytest.raises(psycopg.ProgrammingError):
            psycopg.connect(render("{db.url}", config))
        with psycopg.connect(render("{db.dsn}", config)) as conn:
            (found,) = conn.execute("SELECT current_schema()").fetchone() or (None,)
        assert found == schema
    finally:
        with engine.begin() as c:
            c.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        engine.dispose()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ("X={db.schema}", "{db.schema} is a PostgreSQL schema, and this campaign's database is"),
        ("X={db.dsn}", "{db.dsn} is a PostgreSQL URL, and this campaign's database is"),
        ("X={provider.mail.url}", "unknown placeholder {provider.mail.url}"),
    ],
)
def test_a_template_this_campaign_cannot_fill_is_refused_before_any_case(
    tmp_path: Path, settings: str, expected: str
) -> None:
    """On the command line the providers and the database are known only once the campaign
    is set up: a placeholder naming a provider it does not have, or a database it does not
    use, is bad input then (exit 2), before the dry run starts a worker."""
    (tmp_path / "worker.py").write_text("raise SystemExit('never started')\n")
    proc = _harness(
        tmp_path, "certify", "--system-cmd", f"{settings} python worker.py", "--seed", "1"
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert expected in said, said
    assert "never started" not in said
