"""The browse page: what a provider received, per destination, in a browser (``/_browse``).

People reach for Mailpit or WireMock to look at what was sent; this page is that view of the
effect log. It is rendered on the server from the log alone: no script, no external font,
style sheet or image (inline CSS only, and a Content-Security-Policy that forbids fetching
anything), so it works offline and cannot leak. Every piece of message content is
HTML-escaped; an e-mail's HTML part is shown in an ``<iframe sandbox srcdoc>`` (no scripts,
no forms, no network) and as escaped source. Secrets never reach the page: records hold only
the credential *id*, and request bodies and SMTP DATA carry no credentials.

Access (decided by ``ProviderApp``): the admin token, or ``open`` (``providers serve
--browse``, allowed only on loopback).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any, Final

from fake_providers._effect_log import Logged
from fake_providers._mail import mime_parts, parse_mail, text_of

PATH: Final = "/_browse"
COOKIE: Final = "crash_harness_browse"

CSP: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Nothing may be fetched, run or submitted; only the page's own inline style applies."""

OUTCOME_LABELS: Final = {
    "fresh": "accepted",
    "expired_then_accepted": "accepted (key had expired)",
    "deduplicated": "deduplicated",
    "rejected": "rejected",
    "refused": "refused (out of scope)",
    "unauthenticated": "unauthenticated",
    "failed_by_fault": "failed (injected fault)",
    "stale_epoch": "refused (stale epoch)",
}

_STYLE: Final = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#fafafa;color:#1d1d1f}
header{background:#243447;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px} header p{margin:4px 0 0;color:#c9d6e3}
main{padding:8px 24px 32px} nav a{margin-right:10px}
section{background:#fff;border:1px solid #ddd;border-radius:6px;margin:16px 0;padding:4px 16px}
h2{font-size:16px;margin:10px 0} h2 small{color:#666;font-weight:normal}
table{border-collapse:collapse;width:100%} th,td{text-align:left;padding:4px 8px;
vertical-align:top;border-bottom:1px solid #eee} th{font-size:12px;color:#555}
code,pre{font:12px/1.4 ui-monospace,monospace} pre{white-space:pre-wrap;word-break:break-all;
background:#f3f3f3;padding:8px;border-radius:4px;margin:4px 0;max-height:420px;overflow:auto}
.o{font-weight:600;border-radius:4px;padding:1px 6px;white-space:nowrap}
.o-fresh,.o-expired_then_accepted{background:#d7f5dd;color:#135c22}
.o-deduplicated{background:#dbe9ff;color:#123f85}
.o-rejected,.o-refused,.o-unauthenticated,.o-stale_epoch{background:#ffe0dc;color:#8a1d10}
.reason{display:inline-block;max-width:40em;color:#8a1d10;font-size:.9em;white-space:normal}
.o-failed_by_fault{background:#fff0c7;color:#6b4b00}
iframe{width:100%;height:220px;border:1px solid #ccc;background:#fff}
.headers th{width:110px} .muted{color:#777} .summary span{margin-right:14px}
"""


def cookie_value(admin_token: str) -> str:
    """What the browse cookie holds: derived from the admin token, never the token itself, so
    a cookie that leaks is useless against the admin API."""
    return hmac.new(admin_token.encode(), b"crash-harness browse", hashlib.sha256).hexdigest()


def _time(stamp: float) -> str:
    """A provider-clock time as UTC, to the millisecond."""
    whole = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp))
    return f"{whole}.{int((stamp % 1) * 1000):03d}Z"


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _pre(text: str) -> str:
    return f"<pre>{escape(text)}</pre>"


def _http_message(raw: bytes) -> str:
    """A worker's HTTP request body: the message text, then the whole body (pretty JSON)."""
    try:
        data: Any = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "<p class=muted>body as received (not JSON):</p>" + _pre(_text(raw))
    shown = ""
    if isinstance(data, dict) and isinstance(data.get("body"), str):
        shown = "<p class=muted>message body:</p>" + _pre(data["body"])
    pretty = json.dumps(data, indent=2, ensure_ascii=False)
    return shown + "<details><summary>request as received</summary>" + _pre(pretty) + "</details>"


def _mail_message(raw: bytes) -> str:
    """An SMTP message: headers, text part, HTML part (sandboxed and as source), the parts,
    and the raw DATA exactly as received."""
    message = parse_mail(raw)
    rows = "".join(
        f"<tr><th>{escape(name)}</th><td>{escape(str(message.get(name)))}</td></tr>"
        for name in ("From", "To", "Cc", "Subject", "Date", "Message-ID")
        if message.get(name) is not None
    )
    out = [f"<table class=headers>{rows}</table>"]
    # SMTP carries CRLF line ends; a decoded part is shown with plain newlines.
    text = text_of(message, ("plain",)).replace("\r\n", "\n")
    if text:
        out.append("<p class=muted>text part:</p>" + _pre(text))
    html_part = text_of(message, ("html",)).replace("\r\n", "\n")
    if html_part:
        out.append(
            "<p class=muted>HTML part (rendered in a sandbox: no scripts, no network):</p>"
            f'<iframe sandbox="" referrerpolicy="no-referrer" srcdoc="{escape(html_part)}">'
            "</iframe><details><summary>HTML source</summary>" + _pre(html_part) + "</details>"
        )
    parts = "".join(
        f"<li><code>{escape(p['content_type'])}</code>"
        + (f" {escape(p['filename'])}" if p["filename"] else "")
        + (f" ({escape(p['disposition'])})" if p["disposition"] else "")
        + f" <span class=muted>{p['size']} bytes</span></li>"
        for p in mime_parts(message)
    )
    out.append(f"<p class=muted>MIME parts:</p><ul class=parts>{parts}</ul>")
    out.append("<details><summary>raw message as received</summary>" + _pre(_text(raw)))
    out.append("</details>")
    return "".join(out)


def _message(record: Logged, *, mail: bool) -> str:
    if record.request is None:
        return "<span class=muted>(no message: nothing was received with this record)</span>"
    return _mail_message(record.request) if mail else _http_message(record.request)


def _row(record: Logged, *, mail: bool) -> str:
    e = record.effect
    label = OUTCOME_LABELS.get(e.outcome, e.outcome)
    cells = [
        f"<td>{e.seq}</td>",
        f"<td>{escape(_time(e.received_at))}</td>",
        f'<td><span class="o o-{escape(e.outcome)}" data-outcome="{escape(e.outcome)}">'
        f"{escape(label)}</span> <span class=muted>{escape(str(e.status_code or ''))}</span>"
        + (f"<br><span class=muted>fault: {escape(e.fault)}</span>" if e.fault else "")
        + (
            f'<br><span class=reason data-reason="{escape(e.reason)}">why: {escape(e.reason)}'
            "</span>"
            if e.reason
            else ""
        )
        + "</td>",
        f"<td class=key><code>{escape(e.idempotency_key or '—')}</code></td>",
        f"<td><code>{escape(e.run_id or '—')}</code> / <code>{escape(e.delivery_id or '—')}"
        "</code></td>",
        f"<td><code>{escape(e.recognizer or '—')}</code></td>",
        f"<td><code>{escape(e.provider_message_id or '—')}</code></td>",
        f"<td>{escape(e.credential_id or '—')}</td>",
    ]
    return (
        f'<tr id="seq-{e.seq}">{"".join(cells)}</tr>'
        f"<tr class=message><td></td><td colspan=7>{_message(record, mail=mail)}</td></tr>"
    )


def render_page(
    *,
    preset: str,
    models: str,
    options: Mapping[str, Any],
    current_epoch: int,
    shown_epoch: int | None,
    records: Sequence[Logged],
) -> str:
    """The whole page: a summary, then one section per destination with its records in
    arrival order, each with key, outcome, time and the full message."""
    mail = preset == "smtp"
    by_destination: dict[str, list[Logged]] = {}
    for record in records:
        by_destination.setdefault(record.effect.destination or "", []).append(record)
    counts: dict[str, int] = {}
    for record in records:
        counts[record.effect.outcome] = counts.get(record.effect.outcome, 0) + 1
    summary = "".join(
        f'<span><span class="o o-{escape(k)}">{escape(OUTCOME_LABELS.get(k, k))}</span> {n}</span>'
        for k, n in sorted(counts.items())
    )
    shown_options = " ".join(
        f"{k}={','.join(v) if isinstance(v, list | tuple) else v}"
        for k, v in options.items()
        if k != "identify"
    )
    if options.get("identify") is not None:
        shown_options += f" identify: {options['identify']}"
    which = "all epochs" if shown_epoch is None else f"epoch {shown_epoch}"
    epochs = " ".join(
        f'<a href="{PATH}?epoch={n}">epoch {n}</a>' for n in range(current_epoch, 0, -1)
    )
    sections = []
    for destination in sorted(by_destination):
        rows = by_destination[destination]
        name = escape(destination) if destination else "<i>(no destination)</i>"
        sections.append(
            f'<section data-destination="{escape(destination)}"><h2>{name} '
            f"<small>{len(rows)} record{'s' if len(rows) != 1 else ''}</small></h2><table>"
            "<tr><th>seq</th><th>time (provider clock, UTC)</th><th>outcome</th>"
            "<th>idempotency key</th><th>run / delivery</th><th>recognizer</th>"
            "<th>provider id</th><th>credential</th></tr>"
            + "".join(_row(r, mail=mail) for r in rows)
            + "</table></section>"
        )
    body = "".join(sections) or "<p class=muted>Nothing received in this epoch yet.</p>"
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(preset)}: fake provider</title><style>{_STYLE}</style></head><body>"
        f"<header><h1>fake provider {escape(preset)}</h1><p>{escape(models)}</p>"
        f"<p>options: <code>{escape(shown_options or '(none)')}</code></p></header><main>"
        f"<p class=summary><b>{escape(which)}</b> (current: {current_epoch}), "
        f"{len(records)} records, {len(by_destination)} destinations: {summary}</p>"
        f'<nav>show: <a href="{PATH}">current epoch</a> <a href="{PATH}?epoch=all">all</a> '
        f"{epochs}</nav>{body}</main></body></html>"
    )


def login_page() -> str:
    """What a request without the admin token gets (the token itself is never on it)."""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>fake provider</title>"
        f"<style>{_STYLE}</style></head><body><header><h1>admin token needed</h1></header><main>"
        f"<p>Open <code>{PATH}?token=&lt;admin token&gt;</code> (the token is in the"
        " <code>providers serve</code> banner, or the one you set); the page then keeps a"
        " cookie and drops the token from the address. On loopback, <code>providers serve"
        " --browse</code> opens the page without a token.</p></main></body></html>"
    )
