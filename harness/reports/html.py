"""One self-contained HTML page: the verdict, the matrix as a coloured grid, and for every
case that did not pass a timeline picture, its evidence and the command that replays it.

No network: the CSS is inline, there is no script, fonts are the reader's own (the pictures'
labels are SVG text in the page's sans-serif). Pictures are drawn by ``_svg.timeline_svg``, a
small hand-written SVG generator (no plotting library). Only the first ``MAX_DRAWN_CASES``
cases that did not pass are drawn in full; the rest are listed in a compact table (id,
verdict, failing invariants, replay command), so a campaign with many failures still gives a
page a browser opens quickly.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, MutableMapping, Sequence
from html import escape
from typing import Any

from harness.invariants import fixes
from harness.reports._common import (
    LOOK_WORD,
    accepted_cell,
    by_look,
    case_where,
    duplicated_destinations,
    duplicates,
    effects_line,
    headline,
    invariant_names,
    judged_sentence,
    look,
    lost,
    lost_sentence,
    not_judged_groups,
    not_passing,
    partial_note,
    provider_reasons,
    reason,
    recovery_sentence,
    repeat_because,
    straggler_lines,
    title_parts,
    title_text,
)

_CSS = """
:root { --pass:#2e7d32; --fail:#c62828; --unknown:#f9a825; --unknown-ink:#3e2723;
        --notjudged:#b0bec5; --notjudged-ink:#455a64; --none:#9e9e9e; --ink:#212121;
        --muted:#616161; --line:#e0e0e0; --bg:#fafafa; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--ink); background: var(--bg); }
main { max-width: 1280px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 12px; }
h2 { font-size: 18px; margin: 32px 0 10px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 0 0 8px; }
code, pre { font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }
pre { background: #263238; color: #eceff1; padding: 10px 12px; border-radius: 6px;
      overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
.banner { padding: 14px 18px; border-radius: 8px; color: #fff; font-size: 18px;
          font-weight: 600; margin-bottom: 10px; }
.banner.fail, .banner.gap { background: var(--fail); }
.banner.unknown { background: var(--unknown); color: var(--unknown-ink); }
.banner.pass { background: var(--pass); }
.banner.partial { background: #546e7a; }
.stragglers { background: #fff8e1; border: 1px solid #ffca28; padding: 10px 14px;
  margin: 10px 0; }
.partial-note { background: #fff3e0; border: 1px solid #ffb74d; padding: 10px 14px;
                border-radius: 6px; margin-bottom: 10px; }
.meta { display: flex; flex-wrap: wrap; gap: 6px 22px; color: var(--muted); margin: 8px 0; }
.meta b { color: var(--ink); font-weight: 600; }
table { border-collapse: collapse; background: #fff; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; }
table.matrix th.inv { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap;
                      vertical-align: bottom; font-weight: 500; padding: 8px 4px; }
table.matrix td.cell { width: 34px; min-width: 34px; text-align: center; color: #fff;
                       font-weight: 700; }
td.pass, span.pass { background: var(--pass); }
td.fail, span.fail { background: var(--fail); }
td.unknown, span.unknown, td.undecided, span.undecided { background: var(--unknown);
  color: var(--unknown-ink) !important; }
td.not_judged, span.not_judged { background: var(--notjudged);
  color: var(--notjudged-ink) !important; }
td.cell.undecided a { color: var(--unknown-ink); }
td.cell.not_judged a { color: var(--notjudged-ink); }
li.fail b.look { color: var(--fail); }
li.undecided b.look { color: #f57f17; }
li.not_judged, li.not_judged b.look { color: var(--notjudged-ink); }
li.fail div.fix { color: var(--ink); margin-top: 2px; }
p.judged { margin: 4px 0 10px; }
li.dups b, li.lost b { color: var(--fail); }
.muted { color: var(--notjudged-ink); }
span.gap { background: #6a1b9a; }
span.flaky { background: #5d4037; }
td.none { background: #eeeeee; color: var(--none) !important; }
td.cell a { color: #fff; text-decoration: none; display: block; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff;
         font-size: 12px; font-weight: 600; }
.chips { display: flex; flex-wrap: wrap; gap: 6px; }
.chip { border-radius: 14px; padding: 3px 10px; font-size: 12.5px; border: 1px solid; }
.chip.covered { border-color: var(--pass); color: var(--pass); background: #e8f5e9; }
.chip.uncovered { border-color: var(--fail); color: var(--fail); background: #ffebee; }
.chip.pending { border-color: #90a4ae; color: #546e7a; background: #eceff1; }
.chip.unplanned { border-color: #cfd8dc; color: #90a4ae; background: #fff; }
section.case { background: #fff; border: 1px solid var(--line); border-left: 6px solid var(--fail);
               border-radius: 6px; padding: 14px 18px; margin: 16px 0; }
section.case.unknown { border-left-color: var(--unknown); }
section.case.gap { border-left-color: #6a1b9a; }
section.case.flaky { border-left-color: #5d4037; }
section.case ul { margin: 6px 0 10px; padding-left: 20px; }
figure { margin: 10px 0; overflow-x: auto; }
figure svg { max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 12.5px; }
table.listed td:first-child code { white-space: nowrap; }
table.listed td:last-child code { overflow-wrap: anywhere; }
details summary { cursor: pointer; color: #1565c0; }
footer { color: var(--muted); margin: 40px 0 10px; font-size: 12px; }
"""

#: cases that did not pass drawn in full (picture, evidence, events); the rest are listed
MAX_DRAWN_CASES = 20
#: cases named per provider reason (the rest are counted)
MAX_REASON_CASES = 8

_LETTER = {"pass": "✓", "fail": "✗", "undecided": "?", "not_judged": "○"}


def render_html(
    report: Mapping[str, Any], *, svg_cache: MutableMapping[str, str] | None = None
) -> str:
    """The whole page. ``svg_cache`` (case id + fingerprint -> svg) spares redrawing a picture
    when a partial report is rewritten after every case."""
    level, sentence = headline(report)
    title = f"crash-harness: {report['system']} on {report['database']}"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>crash-harness report: <code>{escape(str(report['system']))}</code>"
        f" on {escape(str(report['database']))}</h1>",
    ]
    note = partial_note(report)
    if note:
        parts.append(f'<div class="partial-note"><b>⏸ {_md_code(note)}</b></div>')
    parts.append(f'<div class="banner {level}">{escape(sentence)}</div>')
    parts.append(f'<p class="judged">Judged: {escape(judged_sentence(report))}</p>')
    recovered = recovery_sentence(report)
    if recovered:
        parts.append(f'<p class="judged">{escape(recovered[:1].upper() + recovered[1:])}</p>')
    parts.append(_meta(report))
    left = straggler_lines(report)
    if left:
        parts.append(
            f'<div class="stragglers"><b>⚠ Stragglers ({len(left)})</b>: processes that'
            " outlived their worker or case (their case cannot pass)<ul>"
            + "".join(f"<li>{escape(line)}</li>" for line in left)
            + "</ul></div>"
        )
    s = report["summary"]
    if s["invariants_violated"]:
        parts.append(
            "<p>Invariants violated: "
            + ", ".join(f"<code>{escape(n)}</code>" for n in s["invariants_violated"])
            + "</p>"
        )
    parts.append(_matrix(report))
    parts.append(_coverage(report))
    bad = not_passing(report)
    if bad:
        parts.append(f"<h2>Cases that did not pass ({len(bad)})</h2>")
        parts.append(
            "<p>Each picture is one case: a lane per worker process (boundary hits as ticks, "
            "the SIGKILL as a red X, the restart as a dashed arrow), the provider's log (one "
            "marker per request: ● fresh effect, ■ deduplicated, ▲ expired then accepted, "
            "✕ refused or failed; a red ring is a duplicate effect, and a dashed red arc joins "
            "it to the effect it repeats) and the ledger's audit trail. The title names the "
            "failed invariants in red; undecided ones (yellow) and not judged ones (grey) are "
            "never counted among them.</p>"
        )
    drawn, listed = bad[:MAX_DRAWN_CASES], bad[MAX_DRAWN_CASES:]
    if listed:
        parts.append(
            f"<p><b>{len(drawn)} of these {len(bad)} cases are drawn in full</b> below (at most "
            f"{MAX_DRAWN_CASES} a page); the other {len(listed)} are listed after them with "
            "their failing invariants and replay commands, without pictures. report.json has "
            "every case's evidence and timeline.</p>"
        )
    for case in drawn:
        parts.append(_case(report, case, svg_cache))
    if listed:
        parts.append(_listed(listed))
    parts.append(_refusals(report))
    parts.append(_determinism(report))
    if report.get("replay"):
        parts.append(
            f"<h2>Rerun the campaign</h2><pre><code>{escape(report['replay'])}</code></pre>"
        )
    parts.append(
        f"<footer>crash-harness {escape(str(report['tool']['version']))} · schema "
        f"<code>{escape(str(report['schema']))}</code> · rendered from report.json</footer>"
    )
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


def _refusals(report: Mapping[str, Any]) -> str:
    """What the providers refused, and why, in every case (passing ones included)."""
    said = provider_reasons(report)
    if not said:
        return ""
    items = "".join(
        f'<li>{escape(text)} <span class="muted">(in '
        + ", ".join(f"<code>{escape(c)}</code>" for c in cases[:MAX_REASON_CASES])
        + (f" and {len(cases) - MAX_REASON_CASES} more" if len(cases) > MAX_REASON_CASES else "")
        + ")</span></li>"
        for text, cases in said
    )
    return f"<h2>What the providers refused, and why</h2><ul>{items}</ul>"


def _md_code(text: str) -> str:
    """Escape, then turn `code` spans into <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))


def _when(ts: Any) -> str:
    try:
        return dt.datetime.fromtimestamp(float(ts), tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def _meta(report: Mapping[str, Any]) -> str:
    s = report["summary"]
    env = report.get("environment", {})
    items = [
        ("seed", str(report["seed"])),
        ("cases", f"{s['passed']} pass · {s['failed']} fail · {s['unknown']} undecided"),
        ("boundaries covered", f"{s['boundaries_covered']}/{s['boundaries_documented']}"),
        ("started", _when(report.get("started_at"))),
        ("took", f"{float(report.get('duration_s', 0.0)):.1f}s"),
        ("python", f"{env.get('python', '?')} on {env.get('platform', '?')}"),
    ]
    if report.get("expected_violation"):
        items.insert(1, ("expected to break", str(report["expected_violation"])))
    if s.get("not_run"):
        items.insert(2, ("not run yet", str(s["not_run"])))
    return (
        '<div class="meta">'
        + "".join(f"<span>{escape(k)}: <b>{escape(v)}</b></span>" for k, v in items)
        + "</div>"
    )


def _anchor(case_id: str) -> str:
    return "case-" + re.sub(r"[^a-z0-9]+", "-", case_id.lower()).strip("-")


def _matrix(report: Mapping[str, Any]) -> str:
    names = invariant_names(report)
    head = (
        "<tr><th>boundary</th><th>verdict</th>"
        + "".join(f'<th class="inv">{escape(n)}</th>' for n in names)
        + "<th>accepted / intended</th><th>time</th></tr>"
    )
    rows = []
    for case in report["cases"]:
        where = case_where(case)
        if case["fault"] not in ("none", "crash"):
            where = f"{case['fault']}@{where}"
        linked = case["verdict"] != "pass"
        cells = []
        for n in names:
            inv = case["invariants"].get(n)
            if inv is None:
                cells.append('<td class="cell none" title="not checked">-</td>')
                continue
            kind = look(inv)
            mark = _LETTER[kind]
            if linked and kind != "pass":
                mark = f'<a href="#{_anchor(case["id"])}">{mark}</a>'
            tip = escape(f"{n}: {LOOK_WORD[kind]}: {reason(inv)}")
            cells.append(f'<td class="cell {kind}" title="{tip}">{mark}</td>')
        verdict = f'<span class="badge {case["verdict"]}">{escape(case["verdict"])}</span>'
        label = escape(where)
        if linked:
            label = f'<a href="#{_anchor(case["id"])}">{label}</a>'
        fx = case["effects"]
        rows.append(
            f"<tr><td><code>{label}</code></td><td>{verdict}</td>{''.join(cells)}"
            f'<td class="num">{escape(accepted_cell(fx, " / "))}</td>'
            f'<td class="num">{float(case["duration_s"]):.2f}s</td></tr>'
        )
    legend = (
        '<p><span class="badge pass">✓ holds</span> <span class="badge fail">✗ failed</span> '
        '<span class="badge undecided">? undecided</span> '
        '<span class="badge not_judged">○ not judged</span> (the system gave nothing to judge '
        "it by, e.g. no ledger adapter: neither a failure nor undecided) — hover a cell for "
        "the checker's summary, click a failing one for its case.</p>"
    )
    return (
        "<h2>Boundary \u00d7 invariant</h2>"
        f'<table class="matrix"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
        + legend
    )


def _coverage(report: Mapping[str, Any]) -> str:
    entries = report.get("coverage") or []
    s = report["summary"]
    if not entries:
        if not s["boundaries_uncovered"]:
            return ""
        entries = [
            {"boundary": b, "covered": False, "hits_reached": 0, "description": ""}
            for b in s["boundaries_uncovered"]
        ]
    chips = []
    for e in entries:
        if e["covered"]:
            cls = "covered"
        elif e.get("pending"):
            cls = "pending"
        elif e.get("planned", True):
            cls = "uncovered"
        else:
            cls = "unplanned"
        state = {
            "covered": "crash landed",
            "pending": "not run yet",
            "uncovered": "never",
            "unplanned": "not in this campaign's cases",
        }[cls]
        tip = escape(f"{e.get('description', '')} — {state}; reached {e['hits_reached']} time(s)")
        chips.append(f'<span class="chip {cls}" title="{tip}">{escape(e["boundary"])}</span>')
    gap = ""
    if s["boundaries_uncovered"]:
        gap = (
            "<p><b>Coverage gap:</b> no crash landed on "
            + ", ".join(f"<code>{escape(b)}</code>" for b in s["boundaries_uncovered"])
            + "</p>"
        )
    return (
        f"<h2>Coverage: {s['boundaries_covered']}/{s['boundaries_documented']} boundaries</h2>"
        f'<div class="chips">{"".join(chips)}</div>{gap}'
    )


def _case(
    report: Mapping[str, Any],
    case: Mapping[str, Any],
    svg_cache: MutableMapping[str, str] | None,
) -> str:
    from harness.engine.store.timeline import synthesize
    from harness.reports._svg import timeline_svg

    verdict = case["verdict"]
    timeline: list[Mapping[str, Any]] = list(case.get("timeline") or [])
    recorded = bool(timeline)
    events = timeline if recorded else synthesize(case)
    anchors = _effect_anchors(case, events) if recorded else {}
    out = [
        f'<section class="case {verdict}" id="{_anchor(case["id"])}">',
        f"<h3><code>{escape(case['id'])}</code> "
        f'<span class="badge {verdict}">{escape(verdict)}</span></h3><ul>',
    ]
    out += _looks(case)
    out += _failure_about(case, anchors)
    out.append(f"<li>provider: {escape(effects_line(case))}</li>")
    out += [f"<li>note: {escape(n)}</li>" for n in case["notes"]]
    if case.get("runs"):
        said = ", then ".join(str(r["verdict"]) for r in case["runs"])
        out.append(f"<li>runs of this schedule (same seed): {escape(said)}</li>")
    out.append("</ul>")
    key = f"{case['id']}:{len(events)}:{events[-1]['t'] if events else 0}:{recorded}"
    svg = svg_cache.get(key) if svg_cache is not None else None
    if svg is None:
        svg = timeline_svg(
            events,
            title=title_text(case),
            title_parts=title_parts(case),
            salt=_anchor(case["id"]),
        )
        if svg_cache is not None:
            svg_cache[key] = svg
    caption = (
        "Timeline from the case's trace, provider log and ledger audit trail."
        if recorded
        else "Coarse timeline from the worker records (the trace was not kept)."
    )
    out.append(f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>")
    out.append(_workers(case))
    evidence = {  # a not-judged check has none: its reason is said above
        n: r["evidence"] for n, r in case["invariants"].items() if look(r) in ("fail", "undecided")
    }
    if any(evidence.values()):
        out.append(
            "<details><summary>evidence (JSON)</summary><pre><code>"
            + escape(json.dumps(evidence, indent=2, sort_keys=True, default=str))
            + "</code></pre></details>"
        )
    if recorded:
        rows = _event_rows(case, events)
        out.append(
            "<details><summary>timeline events (without plain boundary hits)</summary>"
            "<table><tr><th>ms</th><th>lane</th><th>kind</th><th>what</th></tr>"
            f"{rows}</table></details>"
        )
    out.append(f"<p>Replay:</p><pre><code>{escape(case['replay'])}</code></pre>")
    out.append("</section>")
    return "\n".join(out)


def _fix(name: str) -> str:
    """The usual fix of a failed invariant and where the docs say more (empty if none)."""
    fix = fixes.FIXES.get(name)
    if not fix:
        return ""
    where = escape(fixes.link(name))
    return f'<div class="fix">fix: {escape(fix)} (<a href="{where}">{where}</a>)</div>'


def _looks(case: Mapping[str, Any]) -> list[str]:
    """The case's invariants that did not hold, one look each: failed (red ✗), undecided
    (yellow, with why), and not judged (grey, one line per reason), so seven blind spots of
    a system without a ledger adapter never read as seven more failures."""
    groups = by_look(case)
    out = [
        f'<li class="fail"><b class="look">✗ failed</b> <b>{escape(name)}</b>: '
        f"{escape(reason(inv))}{_fix(name)}</li>"
        for name, inv in groups["fail"]
    ]
    out += [
        f'<li class="undecided"><b class="look">? undecided</b> <b>{escape(name)}</b>: '
        f"{escape(reason(inv))}</li>"
        for name, inv in groups["undecided"]
    ]
    out += [
        f'<li class="not_judged"><b class="look">○ not judged</b>: {escape(why)}: '
        + ", ".join(f"<code>{escape(n)}</code>" for n in names)
        + "</li>"
        for why, names in not_judged_groups(case)
    ]
    return out


#: an effect's place on the page: (its provider, with several; else "", its log seq)
_Mark = tuple[str, int]


def _effect_anchors(
    case: Mapping[str, Any], events: Sequence[Mapping[str, Any]]
) -> dict[_Mark, str]:
    """(provider, seq) -> the id of its row in the case's timeline events table (the first
    row with that mark, so ids stay unique on the page). The provider is named only with
    several providers, each of which numbers its own log."""
    anchors: dict[_Mark, str] = {}
    for ev in events:
        detail = ev.get("detail") or {}
        seq = detail.get("seq")
        provider = str(detail.get("provider") or "")
        if ev["kind"] == "effect" and isinstance(seq, int) and (provider, seq) not in anchors:
            tail = f"{provider}-{seq}" if provider else str(seq)
            anchors[(provider, seq)] = f"{_anchor(case['id'])}-effect-{tail}"
    return anchors


def _effect_link(seq: int | None, anchors: Mapping[_Mark, str], provider: str | None = None) -> str:
    """``#seq`` (``mail#seq`` with several providers), a link to its timeline row when the
    page has one."""
    if seq is None:
        return "an effect"
    text = f"{provider or ''}#{seq}"
    mark = (provider or "", seq)
    if mark in anchors:
        return f'<a href="#{anchors[mark]}">{escape(text)}</a>'
    return escape(text)


def _failure_about(case: Mapping[str, Any], anchors: Mapping[_Mark, str]) -> list[str]:
    """What a failure was about: the destinations that got a message twice, each duplicate
    linked to the effect it repeats, and the destinations that never got theirs."""
    out = []
    dups = duplicates(case)
    if dups:
        named = ", ".join(f"<code>{escape(d)}</code>" for d in duplicated_destinations(case))
        items = "".join(
            f"<li>effect {_effect_link(d.seq, anchors, d.provider)} repeats "
            f'<span class="repeats">{_effect_link(d.repeats, anchors, d.repeats_provider)}</span> '
            f"({escape(repeat_because(d))})</li>"
            for d in dups
        )
        out.append(f'<li class="dups"><b>duplicated</b>: {named}<ul>{items}</ul></li>')
    for row in lost(case):
        out.append(f'<li class="lost"><b>lost</b>: {escape(lost_sentence(row))}</li>')
    return out


def _event_rows(case: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> str:
    """The timeline events table (without plain boundary hits); an effect's row is anchored
    by its provider seq, and a duplicate's row links to the row of the effect it repeats."""
    anchors = _effect_anchors(case, events)
    repeats = {
        (d.provider or "", d.seq): (d.repeats, d.repeats_provider)
        for d in duplicates(case)
        if d.seq is not None
    }
    used: set[str] = set()
    rows = []
    for ev in events:
        if ev["kind"] == "hit":
            continue
        detail = ev.get("detail") or {}
        what = escape(str(ev["label"]))
        row_id = ""
        seq = detail.get("seq")
        if ev["kind"] == "effect" and isinstance(seq, int):
            mark = (str(detail.get("provider") or ""), seq)
            what = f"{escape(mark[0])}#{seq} {what}"
            if detail.get("destination") is not None:
                what += f" → {escape(str(detail['destination']))}"
            if mark in repeats:
                original, original_provider = repeats[mark]
                what += f" — repeats {_effect_link(original, anchors, original_provider)}"
            if anchors.get(mark) and anchors[mark] not in used:
                used.add(anchors[mark])
                row_id = f' id="{anchors[mark]}"'
        rows.append(
            f'<tr{row_id}><td class="num">{float(ev["t"]) * 1000:.1f}</td>'
            f"<td>{escape(str(ev['lane']))}</td><td>{escape(str(ev['kind']))}</td>"
            f"<td>{what}</td></tr>"
        )
    return "".join(rows)


def _listed(cases: Sequence[Mapping[str, Any]]) -> str:
    """The cases past ``MAX_DRAWN_CASES``: one row each, anchored so the matrix links land."""
    rows = []
    for case in cases:
        verdict = case["verdict"]
        groups = by_look(case)
        said = []
        if groups["fail"]:
            said.append("failed: " + ", ".join(escape(n) for n, _ in groups["fail"]))
        if groups["undecided"]:
            said.append("undecided: " + ", ".join(escape(n) for n, _ in groups["undecided"]))
        if groups["not_judged"]:
            said.append(f'<span class="muted">{len(groups["not_judged"])} not judged</span>')
        failing = "; ".join(said)
        rows.append(
            f'<tr id="{_anchor(case["id"])}"><td><code>{escape(case["id"])}</code></td>'
            f'<td><span class="badge {verdict}">{escape(verdict)}</span></td>'
            f"<td>{failing or '-'}</td><td><code>{escape(case['replay'])}</code></td></tr>"
        )
    return (
        f"<h2>Listed without pictures ({len(cases)})</h2>"
        '<table class="listed"><tr><th>case</th><th>verdict</th>'
        f"<th>invariants that did not hold</th><th>replay</th></tr>{''.join(rows)}</table>"
    )


def _workers(case: Mapping[str, Any]) -> str:
    rows = []
    for w in case.get("workers", []):
        where = f"{w['boundary']}#{w['hit']}" if w.get("boundary") else ""
        how = w.get("signal") or (w.get("exit_code") if w.get("exit_code") is not None else "")
        rows.append(
            f"<tr><td>{escape(str(w['worker']))}</td><td>{w['pid']}</td>"
            f"<td>{escape(str(w['outcome']))}{_left(w)}</td><td>{escape(where)}</td>"
            f"<td>{escape(str(how))}</td>"
            f'<td class="num">{float(w["duration_s"]):.3f}s</td></tr>'
        )
        tail = w.get("stack_dump") or (
            w["stderr_tail"] if w["outcome"] in ("died", "hung", "killed_unplanned") else ""
        )
        if tail:
            rows.append(
                f'<tr><td colspan="6"><details><summary>{escape(str(w["worker"]))} stderr'
                f"</summary><pre><code>{escape(tail)}</code></pre></details></td></tr>"
            )
    return (
        "<table><tr><th>worker</th><th>pid</th><th>outcome</th><th>killed at</th>"
        f"<th>signal / exit</th><th>ran</th></tr>{''.join(rows)}</table>"
    )


def _left(worker: Mapping[str, Any]) -> str:
    n = int(worker.get("stragglers") or 0)
    return f" (left {n} straggler(s), killed)" if n else ""


def _determinism(report: Mapping[str, Any]) -> str:
    entries = report.get("determinism") or []
    if not entries:
        return ""
    rows = "".join(
        f"<tr><td><code>{escape(d['case'])}</code></td><td>{escape(d['first'])}</td>"
        f"<td>{escape(d['rerun'])}</td><td>{'same' if d['agree'] else '<b>differs</b>'}"
        f"{' ' + escape(d['differs']) if d.get('differs') else ''}</td></tr>"
        for d in entries
    )
    return (
        "<h2>Determinism sample</h2><table><tr><th>case</th><th>first run</th><th>rerun</th>"
        f"<th>verdict</th></tr>{rows}</table>"
    )
