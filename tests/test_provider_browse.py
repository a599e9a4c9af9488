"""The providers' browse page and `providers serve`'s first-hour flags: fixed credentials,
the real dedupe window in the banner, the whole SMTP message kept, and ``/_browse`` (escaped,
token-guarded or open on loopback only) as people and headless Chromium see it."""

from __future__ import annotations

import os
import re
import signal
import smtplib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import EmailMessage
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from fake_providers import ProviderProcess
from fake_providers._effect_log import EffectLog
from fake_providers._errors import ProviderError
from fake_providers._runner import run_provider
from harness.cli import main
from tests._chromium import inked_share, needs_chromium, png_colours, screenshot
from tests.test_provider_cli import read_until

CLI = [sys.executable, "-m", "harness", "providers"]
REC = "ch-0123456789ab"
SECRET = "fixed-secret-0123456789"
TOKEN = "fixed-admin-token-0123456789"
SCRIPT = "<script>alert('owned')</script>"
#: the outcome badge colours of the page (accepted, deduplicated)
GREEN, BLUE = (0xD7, 0xF5, 0xDD), (0xDB, 0xE9, 0xFF)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any provider secret variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASH_HARNESS_PROVIDER_")}
    return {**env, **extra}


@contextmanager
def serve(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, str]]:
    """``providers serve ARGS`` as a real process; yields (URL, banner), stops it with SIGTERM
    and requires exit 0."""
    argv = [*CLI, "serve", *args]
    if "--log" not in args:
        argv += ["--log", str(tmp_path / f"log-{len(list(tmp_path.iterdir()))}.sqlite")]
    with (tmp_path / "serve-stderr.txt").open("ab") as stderr:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
            env=env if env is not None else clean_env(),
        )  # fmt: skip
    try:
        banner = read_until(proc, b"Ctrl-C to stop.")
        url = re.search(r"listening on (http://\S+)", banner)
        assert url is not None, banner
        yield url.group(1), banner
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def page(provider: ProviderProcess, **params: str) -> str:
    """The browse page as the admin sees it (token in the header)."""
    response = requests.get(
        f"{provider.url}/_browse",
        params=params,
        headers={"X-Admin-Token": provider.admin_token},
        timeout=5,
    )
    assert response.status_code == 200, response.text[:500]
    assert response.headers["Content-Type"].startswith("text/html")
    return response.text


def section(html: str, destination: str) -> str:
    """The part of the page listing one destination."""
    found = re.search(
        rf'<section data-destination="{re.escape(destination)}">(.*?)</section>', html, re.S
    )
    assert found is not None, f"no section for {destination!r}"
    return found.group(1)


def post(provider: ProviderProcess, destination: str, body: str, key: str | None = None) -> int:
    """One worker message; returns the status code."""
    headers = provider.auth_headers()
    if key is not None:
        headers["Idempotency-Key"] = key
    message = {"destination": destination, "run_id": "r1", "delivery_id": "d1", "body": body}
    found = re.search(r"ch-[0-9a-f]{12}", body)
    if found is not None:
        message["recognizer"] = found.group(0)
    return requests.post(
        f"{provider.url}/v1/messages", json=message, headers=headers, timeout=5
    ).status_code


def multipart_mail(html_body: str) -> EmailMessage:
    """A mail with a text part, an HTML alternative and an attachment."""
    msg = EmailMessage()
    msg["From"] = "worker@sender.test"
    msg["To"] = "alice@example.com"
    msg["Subject"] = "Invoice <ready>"
    msg["Message-ID"] = "<inv-1@test>"
    msg["X-Run-Id"] = "run-9"
    msg["X-Trace-Token"] = "raw-header-only-7f3a"
    msg.set_content(f"Your invoice is attached.\n[ref {REC}]\n")
    msg.add_alternative(html_body, subtype="html")
    msg.add_attachment(b"%PDF-1.4 fake", maintype="application", subtype="pdf",
                       filename="invoice-42.pdf")  # fmt: skip
    return msg


def send_mail(provider: ProviderProcess, msg: EmailMessage) -> None:
    """AUTH as the worker and send (returns once the provider said 250: the log has it)."""
    assert provider.smtp_port is not None
    with smtplib.SMTP("127.0.0.1", provider.smtp_port, timeout=5) as client:
        client.login("worker", provider.secret())
        client.send_message(msg)


@pytest.fixture(scope="module")
def payments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderProcess]:
    """A payments provider whose worker may charge acct_* only."""
    log = tmp_path_factory.mktemp("browse-payments") / "effects.sqlite"
    credentials = {"worker": ("w-" + "p" * 30, ["acct_*"])}
    with ProviderProcess.start(log_path=log, preset="payments", credentials=credentials) as p:
        yield p


@pytest.fixture(scope="module")
def smtp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderProcess]:
    """An SMTP provider whose worker may mail *@example.com only."""
    log = tmp_path_factory.mktemp("browse-smtp") / "effects.sqlite"
    credentials = {"worker": ("w-" + "s" * 30, ["*@example.com"])}
    with ProviderProcess.start(log_path=log, preset="smtp", credentials=credentials) as p:
        yield p


def test_page_lists_effects_per_destination_with_key_outcome_time_and_message(
    payments: ProviderProcess,
) -> None:
    """Two sends with one key, one other key, one refused: each destination has its section
    with the key, accepted/deduplicated/refused, a time and the body as sent."""
    payments.admin.reset()
    assert post(payments, "acct_1", f"charge one [ref {REC}]", key="key-one") == 200
    assert post(payments, "acct_1", f"charge one [ref {REC}]", key="key-one") == 200
    assert post(payments, "acct_2", "charge two [ref ch-aaaaaaaaaaaa]", key="key-two") == 200
    assert post(payments, "other_9", "not mine [ref ch-bbbbbbbbbbbb]", key="key-3") == 403
    html = page(payments)
    one, two, refused = section(html, "acct_1"), section(html, "acct_2"), section(html, "other_9")
    assert one.count("<code>key-one</code>") == 2
    assert re.findall(r'data-outcome="(\w+)"', one) == ["fresh", "deduplicated"]
    assert ">accepted</span>" in one
    assert ">deduplicated</span>" in one
    assert "charge one [ref ch-0123456789ab]" in one
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z", one)
    assert re.findall(r'data-outcome="(\w+)"', two) == ["fresh"]
    assert "<code>key-two</code>" in two
    assert "charge two" in two
    assert re.findall(r'data-outcome="(\w+)"', refused) == ["refused"]
    assert "not mine" in refused  # a refused request shows what was sent too
    # the previous epoch's records are one click away, not on the current page
    payments.admin.reset()
    assert "key-one" not in page(payments)
    assert "key-one" in page(payments, epoch="all")


def test_message_content_is_escaped_never_markup(payments: ProviderProcess) -> None:
    """A body holding <script> and an <img onerror> appears escaped; no such tag is served."""
    payments.admin.reset()
    body = f"{SCRIPT}<img src=x onerror=alert(2)> & done [ref {REC}]"
    assert post(payments, "acct_<b>x</b>", body, key=f"k-{SCRIPT}") == 200
    html = page(payments)
    assert "<script" not in html.lower()
    assert "<img" not in html.lower()
    assert "<b>x</b>" not in html
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt; &amp; done" in html
    assert 'data-destination="acct_&lt;b&gt;x&lt;/b&gt;"' in html


def test_page_shows_why_each_request_was_refused_and_a_near_miss_names_the_field(
    payments: ProviderProcess,
) -> None:
    """Issue 24: the page said only "rejected 400"; now every refused record shows the
    provider's reason (escaped), a near miss naming the parameter that differed."""
    payments.admin.reset()
    assert post(payments, "acct_why", "first <b>", key="k-why") == 200
    assert post(payments, "acct_why", "second <b>", key="k-why") == 422
    assert post(payments, "acct_why", "no key") == 400
    html = section(page(payments), "acct_why")
    assert "why: idempotency_error: key &#x27;k-why&#x27; was first used with other" in html
    assert "differs in: body (first &#x27;first &lt;b&gt;&#x27;" in html
    assert "why: no Idempotency-Key header" in html
    assert "<b>" not in html


def test_page_needs_the_admin_token_and_never_shows_a_secret(payments: ProviderProcess) -> None:
    """No token or a wrong one: 401 with no record on it. ?token= once: a cookie (not the
    token) and a redirect that drops it; the page never holds the secret or the token."""
    payments.admin.reset()
    assert post(payments, "acct_1", f"secretive [ref {REC}]", key="key-s") == 200
    url = f"{payments.url}/_browse"
    bare = requests.get(url, timeout=5)
    wrong = requests.get(url, params={"token": "x" * 40}, timeout=5, allow_redirects=False)
    for refused in (bare, wrong):
        assert refused.status_code == 401
        assert "key-s" not in refused.text
        assert "admin token needed" in refused.text
    with requests.Session() as browser:
        login = browser.get(
            url, params={"token": payments.admin_token, "epoch": "all"}, allow_redirects=False,
            timeout=5,
        )  # fmt: skip
        assert login.status_code == 303
        assert login.headers["Location"] == "/_browse?epoch=all"
        cookie = browser.cookies.get("crash_harness_browse")
        assert cookie
        assert payments.admin_token not in cookie
        assert "HttpOnly" in login.headers["Set-Cookie"]
        shown = browser.get(url, timeout=5)
        assert shown.status_code == 200
        assert "key-s" in shown.text
        assert "default-src 'none'" in shown.headers["Content-Security-Policy"]
    # the cookie opens only the page, never the admin API
    admin = requests.get(
        f"{payments.url}/_admin/effects", cookies={"crash_harness_browse": cookie}, timeout=5
    )
    assert admin.status_code == 401
    for text in (shown.text, bare.text):
        assert payments.secret() not in text
        assert payments.admin_token not in text


def test_smtp_keeps_the_raw_message_and_every_part_and_the_page_renders_them(
    smtp: ProviderProcess,
) -> None:
    """A multipart mail (text, HTML with a script, a PDF): the log still counts one fresh
    effect; the mailbox has the HTML and the attachment name; the page shows the headers, the
    text, the HTML in a script-less sandbox, the parts, and the raw DATA as received."""
    smtp.admin.reset()
    html_body = f"<p>Dear <b>Alice</b></p>{SCRIPT}<p>Total: 42 EUR</p>"
    send_mail(smtp, multipart_mail(html_body))
    smtp.admin.assert_effects(1, outcome="fresh", destination="alice@example.com")
    found = requests.get(f"{smtp.url}/v1/mailbox", headers=smtp.auth_headers(), timeout=5).json()[
        "messages"
    ]
    assert [m["attachments"] for m in found] == [["invoice-42.pdf"]]
    assert "<b>Alice</b>" in found[0]["html"]
    assert "Your invoice is attached." in found[0]["text"]
    html = page(smtp)
    mail = section(html, "alice@example.com")
    assert "Invoice &lt;ready&gt;" in mail  # subject, escaped
    assert "Your invoice is attached.\n[ref ch-0123456789ab]" in mail  # the text part
    iframe = re.search(r'<iframe sandbox="" [^>]*srcdoc="([^"]*)"', mail)
    assert iframe is not None, mail
    assert "&lt;b&gt;Alice&lt;/b&gt;" in iframe.group(1)
    assert "allow-scripts" not in mail
    assert "<script" not in html.lower()
    assert "application/pdf</code> invoice-42.pdf (attachment)" in mail
    assert "text/html" in mail
    assert "text/plain" in mail
    # raw: a header no rendered view shows, the MIME boundary, the attachment's base64
    assert "X-Trace-Token: raw-header-only-7f3a" in mail
    assert re.search(r"boundary=&quot;=+\d+==&quot;", mail), "no MIME boundary in the raw view"
    assert "JVBERi0xLjQgZmFrZQ==" in mail  # base64 of the PDF bytes, as sent
    assert smtp.secret() not in html
    assert smtp.admin_token not in html


def test_serve_with_fixed_credentials_keeps_them_across_a_restart(tmp_path: Path) -> None:
    """--secret from its env var and --admin-token as a flag: the banner never echoes them,
    both work, and a second start on the same log takes the same ones."""
    log = tmp_path / "payments.sqlite"
    env = clean_env(CRASH_HARNESS_PROVIDER_SECRET=SECRET)
    body = {"destination": "a", "run_id": "r", "delivery_id": "d", "body": "x", "recognizer": REC}
    for attempt in ("first", "second"):
        args = ("--preset", "payments", "--log", str(log), "--admin-token", TOKEN)
        with serve(tmp_path, *args, env=env) as (url, banner):
            assert SECRET not in banner
            assert TOKEN not in banner
            assert "Bearer <the one you set>" in banner
            assert "X-Admin-Token: <the one you set>" in banner
            sent = requests.post(
                f"{url}/v1/messages", json=body, timeout=5,
                headers={"Authorization": f"Bearer {SECRET}", "Idempotency-Key": attempt},
            )  # fmt: skip
            assert sent.status_code == 200, sent.text
            effects = requests.get(
                f"{url}/_admin/effects", headers={"X-Admin-Token": TOKEN}, timeout=5
            ).json()["effects"]
            assert [e["idempotency_key"] for e in effects] == ["first", "second"][
                : 1 + (attempt == "second")
            ]
    stderr = (tmp_path / "serve-stderr.txt").read_text()
    assert SECRET not in stderr
    assert TOKEN not in stderr


@pytest.mark.parametrize(
    ("args", "env", "names"),
    [
        (["--secret", "short"], {}, "--secret (or CRASH_HARNESS_PROVIDER_SECRET) must be at"),
        (["--secret", ""], {}, "--secret (or CRASH_HARNESS_PROVIDER_SECRET) must not be empty"),
        (["--admin-token", "with a space in it, long"], {}, "--admin-token (or CRASH_HARN"),
        (["--admin-token", "ünïcödé-token-0123456789"], {}, "printable ASCII"),
        ([], {"CRASH_HARNESS_PROVIDER_SECRET": "tab\there-0123456789"}, "--secret (or CRA"),
        (["--secret", SECRET, "--admin-token", SECRET], {}, "admin token must differ"),
        (
            ["--secret", SECRET],
            {"CRASH_HARNESS_PROVIDER_CREDENTIALS": '{"w": {"secret": "abc", "scope": ["*"]}}'},
            "--secret and CRASH_HARNESS_PROVIDER_CREDENTIALS both",
        ),
        (["--host", "0.0.0.0", "--allow-non-loopback", "--browse"], {}, "--browse is allowed"),
    ],
)
def test_serve_refuses_bad_fixed_credentials_and_open_browse_beyond_loopback(
    args: list[str], env: dict[str, str], names: str
) -> None:
    """Each bad input: exit 2 and one line on stderr naming the flag, never the value."""
    result = CliRunner().invoke(
        main, ["providers", "serve", "--preset", "chat", *args], env={**clean_env(), **env}
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert names in lines[0], result.stderr
    for value in (*args, *env.values()):
        if len(value) > 5 and not value.startswith("--") and value != "0.0.0.0":
            assert value not in result.stderr


def test_open_browse_is_refused_beyond_loopback_by_the_runner_too(tmp_path: Path) -> None:
    """run_provider refuses browse_open on a non-loopback host even with allow_non_loopback."""
    with pytest.raises(ProviderError, match="loopback only"):
        run_provider(
            preset="chat", options=None, log_path=tmp_path / "x.sqlite", host="0.0.0.0",
            port=0, credentials={}, admin_token=TOKEN, on_ready=lambda _r: None,
            allow_non_loopback=True, browse_open=True,
        )  # fmt: skip
    assert not (tmp_path / "x.sqlite").exists()  # refused before anything was opened


@pytest.mark.parametrize(
    ("args", "said", "not_said"),
    [
        (["--preset", "payments", "--window-s", "3600"], "remembered 1 h (3600 s", "24 h"),
        (["--preset", "queue-fifo", "--window-s", "90"], "remembered 90 s (90 s", "5 min"),
        (["--preset", "payments"], "remembered 24 h (86400 s", "1 h"),
        (["--preset", "webhook", "--no-dedupe"], "dedupe:     off", "remembered"),
        (["--preset", "chat"], "dedupe:     none", "remembered"),
    ],
)
def test_banner_reports_the_dedupe_window_it_runs_with(
    tmp_path: Path, args: list[str], said: str, not_said: str
) -> None:
    """The banner's window follows --window-s (and the switches), never a preset's default."""
    with serve(tmp_path, *args) as (url, banner):
        assert said in banner, banner
        assert not_said not in banner, banner
        window = requests.get(f"{url}/_admin/health", timeout=5)
        assert window.status_code == 200


def test_browse_flag_opens_the_page_on_loopback_without_a_token(tmp_path: Path) -> None:
    """serve --browse: /_browse answers 200 with no token; the admin API still wants one."""
    with serve(tmp_path, "--preset", "chat", "--browse") as (url, banner):
        assert f"browse:     {url}/_browse (open" in banner
        shown = requests.get(f"{url}/_browse", timeout=5)
        assert shown.status_code == 200
        assert "fake provider chat" in shown.text
        assert requests.get(f"{url}/_admin/effects", timeout=5).status_code == 401


@needs_chromium
def test_browse_page_screenshot_in_headless_chromium(smtp: ProviderProcess, tmp_path: Path) -> None:
    """Chromium logs in with ?token=, follows the redirect with the cookie, and renders the
    page (an accepted mail with its sandboxed HTML, and a refused one) to a full PNG."""
    smtp.admin.reset()
    # if the message's script ran, the sandboxed frame would turn bright green
    paint = "<script>document.body.style.background='#00ff00'</script>"
    send_mail(smtp, multipart_mail(f"<h1 style='color:#c62828'>Invoice</h1>{paint}"))
    assert smtp.smtp_port is not None
    with smtplib.SMTP("127.0.0.1", smtp.smtp_port, timeout=5) as client:
        client.login("worker", smtp.secret())
        with pytest.raises(smtplib.SMTPRecipientsRefused):
            client.sendmail("worker@sender.test", ["eve@elsewhere.test"], b"Subject: no\r\n\r\nno")
    png = tmp_path / "browse.png"
    target = f"{smtp.url}/_browse?token={smtp.admin_token}"
    stderr = screenshot(target, png, size=(1200, 800), profile=tmp_path / "profile")
    assert png.exists(), stderr
    size, counts = png_colours(png)
    assert size == (1200, 800)
    assert len(counts) > 150, len(counts)  # text, badges, the header bar: not a blank page
    assert inked_share(size, counts) > 0.05
    big = {colour for n, colour in counts if n > 200}
    assert GREEN in big, "no 'accepted' badge: the page shown was not the list"
    assert (0x24, 0x34, 0x47) in big  # the header bar
    assert (0xC6, 0x28, 0x28) in big  # the mail's HTML part, rendered in its sandbox
    assert (0, 255, 0) not in {colour for _n, colour in counts}  # ... with its script dead


def test_a_log_written_before_requests_were_kept_opens_and_keeps_them_from_then_on(
    tmp_path: Path,
) -> None:
    """A schema-3 log (no request column) is migrated in place: its records stay, with no
    request, and a new record keeps its request bytes exactly."""
    path = tmp_path / "old.sqlite"
    log = EffectLog(path)
    log.append(epoch=1, received_at=1.0, outcome="fresh", destination="a")
    log.close()
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE effects DROP COLUMN request")
        conn.execute("PRAGMA user_version=3")
    conn.close()
    log = EffectLog(path)
    try:
        log.append(epoch=1, received_at=2.0, outcome="fresh", destination="b", request=b"\xff<x>")
        kept = [(r.effect.destination, r.request) for r in log.everything(epoch=None)]
    finally:
        log.close()
    assert kept == [("a", None), ("b", b"\xff<x>")]
