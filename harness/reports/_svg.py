"""Draw a case's timeline as an inline SVG, by hand: plain string building, no plotting library.

One lane per worker incarnation (a bar from spawn to exit, a tick per boundary hit, a red X
for the SIGKILL, the way it ended), a lane for the provider (one marker per request, shaped
by outcome: fresh, deduplicated, expired-then-accepted, refused; a red ring around a
duplicate effect), and a lane for the ledger's audit trail (state changes) when it was read.
Text stays text (``<text>`` in the page's own sans-serif), every data-derived string and
colour is escaped, and the picture has no ids, so any number of them can share one page; it
links nothing, so the HTML report stays self-contained.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any

from harness.engine.store.timeline import HARNESS_LANE, LEDGER_LANE, PROVIDER_LANE

#: marker, face colour, edge colour and legend text per provider outcome
#: (markers: "o" circle, "s" square, "^" triangle, "x" cross)
EFFECT_STYLE: dict[str, tuple[str, str, str, str]] = {
    "fresh": ("o", "#2e7d32", "#1b5e20", "fresh effect"),
    "deduplicated": ("s", "#ffffff", "#1565c0", "deduplicated (same key)"),
    "expired_then_accepted": ("^", "#ef6c00", "#e65100", "expired, then accepted again"),
}

_OTHER_EFFECT = ("x", "#424242", "#424242", "refused / failed / rejected")

#: colour per ledger audit event (a state change or a persisted answer)
LEDGER_COLOURS: dict[str, str] = {
    "enqueued": "#9e9e9e",
    "claimed": "#1e88e5",
    "attempt": "#90caf9",
    "accepted": "#43a047",
    "reconciled": "#00897b",
    "delivered": "#1b5e20",
    "retry_scheduled": "#fbc02d",
    "unknown": "#fb8c00",
    "review": "#8e24aa",
    "failed": "#c62828",
    "cleaned": "#cfd8dc",
    "resolved_by_operator": "#000000",
}

OUTCOME_COLOURS = {
    "completed": "#2e7d32",
    "crashed_as_planned": "#c62828",
    "killed_unplanned": "#6a1b9a",
    "died": "#ef6c00",
    "hung": "#ef6c00",
    "stopped": "#2e7d32",
    "exited_after_crash": "#c62828",
}

#: the page's own fonts (html.py's body font), so the picture reads like the text around it
FONT_FAMILY = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
WIDTH = 1040
_ROW = 46  # px per lane
_RIGHT = 16  # px right of the plot area
_LABEL_MAX = 90  # characters of a data-derived label before it is cut with an ellipsis
_KILL = "#c62828"
#: the title's colour per look of an invariant (``harness.reports._common.look``): failed
#: red, undecided a dark yellow that reads on white, not judged grey
TITLE_COLOURS = {
    "head": "#212121",
    "fail": "#c62828",
    "undecided": "#f57f17",
    "not_judged": "#757575",
}
_DUPLICATE = "#d50000"
_INK = "#212121"
_MUTED = "#455a64"


def _lanes(events: Sequence[Mapping[str, Any]]) -> list[str]:
    workers: list[str] = []
    others: list[str] = []
    for ev in events:
        lane = str(ev["lane"])
        if lane in (PROVIDER_LANE, LEDGER_LANE, HARNESS_LANE):
            continue
        if lane not in workers:
            workers.append(lane)
    for lane in (HARNESS_LANE, PROVIDER_LANE, LEDGER_LANE):
        if any(ev["lane"] == lane for ev in events):
            others.append(lane)
    return workers + others


# -- small helpers -----------------------------------------------------------------------------

#: characters XML 1.0 does not allow (C0 controls but tab/newline/return, lone surrogates)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _esc(value: object) -> str:
    """Text or an attribute value, escaped for HTML and XML alike."""
    return escape(_NOT_XML.sub("\ufffd", str(value)), quote=True)


def _n(v: float) -> str:
    """A coordinate, short: one decimal, no trailing zero."""
    text = f"{v:.1f}"
    if text.endswith(".0"):
        text = text[:-2]
    return "0" if text == "-0" else text


def _cut(text: str, limit: int = _LABEL_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


#: advance widths of printable ASCII (" " to "~") in DejaVu Sans, in hundredths of an em: the
#: widest common fallback for the page's sans-serif, so a label measured with it fits in any
#: of them
# fmt: off
_WIDTHS = (
    32, 40, 46, 84, 64, 95, 78, 27, 39, 39, 50, 84, 32, 36, 32, 34, 64, 64, 64, 64, 64, 64, 64,
    64, 64, 64, 34, 34, 84, 84, 84, 53, 100, 68, 69, 70, 77, 63, 58, 77, 75, 29, 29, 66, 56, 86,
    75, 79, 60, 79, 69, 63, 61, 73, 68, 99, 69, 61, 69, 39, 34, 39, 84, 50, 50, 61, 63, 55, 63,
    62, 35, 63, 63, 28, 28, 58, 28, 97, 63, 61, 63, 63, 41, 52, 39, 63, 59, 82, 59, 59, 52, 64,
    34, 64, 84,
)
#: the same for DejaVu Sans Bold
_WIDTHS_BOLD = (
    35, 46, 52, 84, 70, 100, 87, 31, 46, 46, 52, 84, 38, 42, 38, 37, 70, 70, 70, 70, 70, 70, 70,
    70, 70, 70, 40, 40, 84, 84, 84, 58, 100, 77, 76, 73, 83, 68, 68, 82, 84, 37, 37, 77, 64, 100,
    84, 85, 73, 85, 77, 72, 68, 81, 77, 110, 77, 72, 73, 46, 37, 46, 84, 50, 50, 67, 72, 59, 72,
    68, 44, 72, 71, 34, 34, 67, 34, 104, 71, 69, 72, 72, 49, 60, 48, 71, 65, 92, 65, 65, 58, 71,
    37, 71, 84,
)
# fmt: on


def _text_width(text: str, size: float, *, bold: bool = False) -> float:
    """A label's width in px at ``size`` px (anything past ASCII counts as a wide glyph)."""
    table = _WIDTHS_BOLD if bold else _WIDTHS
    return size / 100 * sum(table[o - 32] if 32 <= (o := ord(ch)) < 127 else 90 for ch in text)


def _text(
    x: float,
    y: float,
    text: str,
    *,
    size: float,
    fill: str = _INK,
    anchor: str = "start",
    bold: bool = False,
) -> str:
    attrs = f'x="{_n(x)}" y="{_n(y)}" font-size="{_n(size)}"'
    if fill != _INK:
        attrs += f' fill="{_esc(fill)}"'
    if anchor != "start":
        attrs += f' text-anchor="{anchor}"'
    if bold:
        attrs += ' font-weight="bold"'
    return f"<text {attrs}>{_esc(text)}</text>"


def _shape_path(shape: str, x: float, y: float, size: float) -> str:
    """Path data for one marker of ``size`` px centred on (x, y)."""
    h = size / 2
    if shape == "o":
        arc = f"a{_n(h)} {_n(h)} 0 1 0"
        return f"M{_n(x - h)} {_n(y)}{arc} {_n(size)} 0{arc} -{_n(size)} 0Z"
    if shape == "s":
        return f"M{_n(x - h)} {_n(y - h)}h{_n(size)}v{_n(size)}h-{_n(size)}Z"
    if shape == "^":
        return f"M{_n(x)} {_n(y - h)}L{_n(x + h)} {_n(y + h)}H{_n(x - h)}Z"
    if shape == ">":
        return f"M{_n(x - h)} {_n(y - h)}L{_n(x + h)} {_n(y)}L{_n(x - h)} {_n(y + h)}Z"
    if shape == "D":
        return f"M{_n(x)} {_n(y - h)}L{_n(x + h)} {_n(y)}L{_n(x)} {_n(y + h)}L{_n(x - h)} {_n(y)}Z"
    if shape == "|":
        return f"M{_n(x)} {_n(y - h)}v{_n(size)}"
    # "x" / "X": a cross (stroked)
    return (
        f"M{_n(x - h)} {_n(y - h)}l{_n(size)} {_n(size)}"
        f"M{_n(x - h)} {_n(y + h)}l{_n(size)} -{_n(size)}"
    )


def _marks(
    shape: str,
    points: Sequence[tuple[float, float]],
    size: float,
    *,
    face: str,
    edge: str | None = None,
    width: float = 1.5,
) -> str:
    """Markers of one look as a single ``<path>`` (one subpath each)."""
    if not points:
        return ""
    d = "".join(_shape_path(shape, x, y, size) for x, y in points)
    if shape in ("|", "x", "X"):
        return f'<path d="{d}" fill="none" stroke="{_esc(face)}" stroke-width="{_n(width)}"/>'
    stroke = f' stroke="{_esc(edge)}" stroke-width="{_n(width)}"' if edge else ""
    fill = "none" if face == "none" else _esc(face)
    return f'<path d="{d}" fill="{fill}"{stroke}/>'


def _nice_ticks(lo: float, hi: float, target: int = 8) -> tuple[list[float], int]:
    """Ticks at 1, 2, 2.5 or 5 times a power of ten inside [max(lo, 0), hi], and the decimals
    their labels need."""
    raw = (hi - lo) / target
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag * 1.0000001)
    first = math.ceil(max(lo, 0.0) / step - 1e-9) * step
    ticks = []
    i = 0
    while first + i * step <= hi + step * 1e-9:
        ticks.append(first + i * step)
        i += 1
    decimals = next(d for d in range(8) if abs(round(step, d) - step) < step * 1e-6)
    return ticks, decimals


class _Labels:
    """Labels placed so they neither overlap each other nor run off the picture: each tries
    its positions in order, on the right of its mark or, near the right edge, ending at it."""

    def __init__(self, left: float, right: float) -> None:
        self.left, self.right = left, right
        self.boxes: list[tuple[float, float, float, float]] = []
        self.parts: list[str] = []

    def block(self, x1: float, y1: float, x2: float, y2: float) -> None:
        """Keep labels off a line (a restart arrow) where they have somewhere else to go."""
        steps = max(1, int(math.hypot(x2 - x1, y2 - y1) / 6))
        for i in range(steps + 1):
            px, py = x1 + (x2 - x1) * i / steps, y1 + (y2 - y1) * i / steps
            self.boxes.append((px - 2, py - 2, px + 2, py + 2))

    def add(
        self,
        text: str,
        x: float,
        ys: Sequence[float],
        *,
        size: float,
        fill: str = _INK,
        bold: bool = False,
        dx: float = 6.0,
    ) -> None:
        text = _cut(text)
        width = _text_width(text, size, bold=bold)
        if x + dx + width <= self.right:
            anchor, x0, at = "start", x + dx, x + dx
        else:  # would run off the right edge: end it at the mark instead
            at = max(x - dx, self.left + width)
            anchor, x0 = "end", at - width
        best: tuple[float, float, tuple[float, float, float, float]] | None = None
        for y in ys:  # the first place clear of every label so far, else the least covered
            box = (x0, y - size * 0.75, x0 + width, y + size * 0.22)
            covered = sum(_overlap(box, other) for other in self.boxes)
            if best is None or covered < best[0]:
                best = (covered, y, box)
            if not covered:
                break
        assert best is not None
        self.boxes.append(best[2])
        self.parts.append(_text(at, best[1], text, size=size, fill=fill, anchor=anchor, bold=bold))


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """The area two boxes (x0, y0, x1, y1) share, with 3 px between words on one line."""
    w = min(a[2], b[2]) + 3 - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


# -- the picture -------------------------------------------------------------------------------


def timeline_svg(
    events: Sequence[Mapping[str, Any]],
    *,
    title: str = "",
    title_parts: Sequence[tuple[str, str]] = (),
    salt: str = "timeline",
) -> str:
    """The timeline as an ``<svg>`` element for an HTML5 page (no XML prolog, no namespaces:
    the HTML parser supplies them; add ``xmlns`` to read it as XML). ``salt`` is kept for
    callers: the picture has no ids, so pictures sharing a page cannot clash.

    ``title_parts`` (``(look, text)``, see ``_common.title_parts``) draws the visible title in
    pieces coloured by look, so the failed invariants are red and the undecided and
    not-judged ones are not; ``title`` stays the plain text of the ``<title>`` tooltip."""
    del salt
    lanes = _lanes(events) or ["(no events)"]
    names = {lane: _cut(lane, 24) for lane in lanes}
    left = min(220.0, max(64.0, 18 + max(_text_width(n, 12) for n in names.values())))
    right = WIDTH - _RIGHT
    top = 34.0 if title else 12.0
    row = {lane: top + _ROW * (i + 0.5) for i, lane in enumerate(lanes)}
    bottom = top + _ROW * len(lanes)

    times = [float(ev["t"]) for ev in events]
    span = max([*times, 1e-3])
    scale, unit = (1000.0, "ms") if span < 2.0 else (1.0, "s")
    lo = min([*times, 0.0]) * scale - 0.02 * span * scale
    hi = span * scale * 1.06

    def x(ev: Mapping[str, Any]) -> float:
        return left + (float(ev["t"]) * scale - lo) / (hi - lo) * (right - left)

    body: list[str] = []
    labels = _Labels(4.0, WIDTH - 4.0)

    # grid, axes, lane names
    ticks, decimals = _nice_ticks(lo, hi)
    grid = "".join(
        f"M{_n(left + (t - lo) / (hi - lo) * (right - left))} {_n(top)}V{_n(bottom)}" for t in ticks
    )
    body.append(f'<path d="{grid}" fill="none" stroke="#eeeeee" stroke-width="0.8"/>')
    tick_marks = "".join(
        f"M{_n(left + (t - lo) / (hi - lo) * (right - left))} {_n(bottom)}v4" for t in ticks
    )
    lane_marks = "".join(f"M{_n(left - 4)} {_n(y)}h4" for y in row.values())
    body.append(
        f'<path d="M{_n(left)} {_n(top)}V{_n(bottom)}H{_n(right)}{tick_marks}{lane_marks}" '
        'fill="none" stroke="#757575" stroke-width="0.8"/>'
    )
    for t in ticks:
        tx = left + (t - lo) / (hi - lo) * (right - left)
        body.append(
            _text(tx, bottom + 16, f"{t:.{decimals}f}", size=10.5, fill="#424242", anchor="middle")
        )
    body.append(
        _text(
            (left + right) / 2,
            bottom + 34,
            f"{unit} since the case started",
            size=11.5,
            fill="#424242",
            anchor="middle",
        )
    )
    for lane, y in row.items():
        body.append(_text(left - 8, y + 4, names[lane], size=12, anchor="end"))

    # the lanes' marks
    by_lane: dict[str, list[Mapping[str, Any]]] = {}
    for ev in events:
        by_lane.setdefault(str(ev["lane"]), []).append(ev)
    body += _restarts(by_lane, row, x, labels)
    for lane, evs in by_lane.items():
        if lane == PROVIDER_LANE:
            body += _provider(evs, row[lane], x, labels)
        elif lane == LEDGER_LANE:
            body += _ledger(evs, row[lane], x)
        else:
            body += _worker(lane, evs, row[lane], x, labels)
    body += labels.parts

    # legend below the axis label, as many items a line as fit
    height = bottom + 44
    entries = _legend_entries(events)
    if entries:
        lx, ly = left, bottom + 58
        for shape, face, edge, text in entries:
            w = 18 + _text_width(text, 11) + 18
            if lx + w > right and lx > left:
                lx, ly = left, ly + 18
            body.append(_legend_mark(shape, face, edge, lx + 6, ly - 4))
            body.append(_text(lx + 16, ly, text, size=11))
            lx += w
        height = ly + 10

    head = []
    if title or title_parts:
        head.append(f"<title>{_esc(title or ' · '.join(t for _, t in title_parts))}</title>")
        room = WIDTH - left - 8
        if title_parts:
            head.append(_title_line(title_parts, left, 20, room))
        else:
            shown = title
            while len(shown) > 8 and _text_width(shown, 13.5, bold=True) > room:
                shown = shown[:-2].rstrip() + "\u2026"
            head.append(_text(left, 20, shown, size=13.5, bold=True))
    h = _n(math.ceil(height))
    return (
        f'<svg width="{WIDTH}" height="{h}" viewBox="0 0 {WIDTH} {h}" role="img" '
        f'font-family="{_esc(FONT_FAMILY)}" fill="{_INK}">\n'
        + "\n".join(
            [*head[:1], f'<rect width="{WIDTH}" height="{h}" fill="#ffffff"/>', *head[1:]]
            + [part for part in body if part]  # a mark with no points is ""
        )
        + "\n</svg>"
    )


_X = Callable[[Mapping[str, Any]], float]


def _title_line(parts: Sequence[tuple[str, str]], x: float, y: float, room: float) -> str:
    """One bold ``<text>`` of coloured ``<tspan>`` pieces joined by " · ", cut with an
    ellipsis where the line would run past ``room`` px."""
    spans = []
    used = 0.0
    for i, (kind, text) in enumerate(parts):
        piece = (" \u00b7 " if i else "") + text
        width = _text_width(piece, 13.5, bold=True)
        if used + width > room:
            while len(piece) > 1 and used + _text_width(piece + "\u2026", 13.5, bold=True) > room:
                piece = piece[:-1]
            piece = piece.rstrip() + "\u2026"
        colour = TITLE_COLOURS.get(kind, _INK)
        spans.append(f'<tspan fill="{_esc(colour)}">{_esc(piece)}</tspan>')
        used += width
        if used > room:
            break
    attrs = f'x="{_n(x)}" y="{_n(y)}" font-size="13.5" font-weight="bold"'
    return f"<text {attrs}>{''.join(spans)}</text>"


def _restarts(
    by_lane: Mapping[str, Sequence[Mapping[str, Any]]],
    row: Mapping[str, float],
    x: _X,
    labels: _Labels,
) -> list[str]:
    """A dashed arrow from each incarnation's end to the next one's start: the restart."""
    out = []
    workers = [lane for lane in row if lane not in (PROVIDER_LANE, LEDGER_LANE, HARNESS_LANE)]
    for before, after in itertools.pairwise(workers):
        ends = [ev for ev in by_lane[before] if ev["kind"] in ("exit", "crash")]
        starts = [ev for ev in by_lane[after] if ev["kind"] == "spawn"]
        if not (ends and starts and float(starts[0]["t"]) >= float(ends[-1]["t"])):
            continue
        x1, y1, x2, y2 = x(ends[-1]), row[before], x(starts[0]), row[after]
        length = math.hypot(x2 - x1, y2 - y1)
        ux, uy = (x2 - x1) / length, (y2 - y1) / length
        x1, y1 = x1 + 4 * ux, y1 + 4 * uy  # clear of the marks at either end
        x2, y2 = x2 - 6 * ux, y2 - 6 * uy
        labels.block(x1, y1, x2, y2)
        head = []
        for turn in (0.45, -0.45):  # an open arrow head, 8 px, 26 degrees either side
            c, s = math.cos(turn), math.sin(turn)
            hx, hy = -(ux * c - uy * s), -(ux * s + uy * c)
            head.append(f"M{_n(x2)} {_n(y2)}l{_n(8 * hx)} {_n(8 * hy)}")
        out.append(
            f'<path d="M{_n(x1)} {_n(y1)}L{_n(x2)} {_n(y2)}" fill="none" stroke="#90a4ae" '
            'stroke-width="1.3" stroke-dasharray="5 3"/>'
        )
        out.append(f'<path d="{"".join(head)}" fill="none" stroke="#90a4ae" stroke-width="1.3"/>')
    return out


def _worker(
    lane: str, evs: Sequence[Mapping[str, Any]], y: float, x: _X, labels: _Labels
) -> list[str]:
    out = []
    spawn = next((ev for ev in evs if ev["kind"] == "spawn"), evs[0])
    exit_ev = next((ev for ev in reversed(evs) if ev["kind"] == "exit"), evs[-1])
    outcome = str(exit_ev.get("detail", {}).get("outcome", ""))
    colour = OUTCOME_COLOURS.get(outcome, "#607d8b")
    if lane != HARNESS_LANE:  # the harness's own actions have no lifetime to draw
        a, b = sorted((x(spawn), x(exit_ev)))
        out.append(
            f'<rect x="{_n(a)}" y="{_n(y - 4)}" width="{_n(max(b - a, 1))}" height="8" '
            'fill="#dde3e6"/>'
        )
    out.append(_marks("|", [(x(ev), y) for ev in evs if ev["kind"] == "hit"], 17, face="#263238"))
    if lane != HARNESS_LANE:
        out.append(_marks(">", [(x(spawn), y)], 11, face=_MUTED))
    if spawn["kind"] == "spawn":
        restart = "restart" if str(spawn["lane"]) != "w1" else "start"
        labels.add(restart, x(spawn), (y - 11, y - 20), size=10, fill=_MUTED, dx=0)
    crashes = [ev for ev in evs if ev["kind"] == "crash"]
    out.append(_marks("X", [(x(ev), y) for ev in crashes], 12, face=_KILL, width=3.2))
    for ev in crashes:
        labels.add(str(ev["label"]), x(ev), (y + 20, y - 11), size=11.5, fill=_KILL, bold=True)
    # anything else (a pause, a harness action, a flag the worker raised): a diamond each, and
    # one label per kind of event with its count, so repeats do not pile up into a smudge
    others: dict[str, list[Mapping[str, Any]]] = {}
    for ev in evs:
        if ev["kind"] not in ("spawn", "hit", "exit", "crash"):
            others.setdefault(str(ev["label"]), []).append(ev)
    for label, group in others.items():
        out.append(_marks("D", [(x(ev), y) for ev in group], 10, face="#6a1b9a"))
        text = label + (f" \u00d7{len(group)}" if len(group) > 1 else "")
        labels.add(text, x(group[0]), (y - 11, y + 20, y - 22, y + 31), size=10, dx=5)
    if exit_ev["kind"] == "exit" and outcome != "crashed_as_planned":
        out.append(_marks("o", [(x(exit_ev), y)], 10, face=colour))
        labels.add(
            str(exit_ev["label"]), x(exit_ev), (y - 10, y + 20, y - 21), size=10, fill=colour
        )
    return out


def _effect_outcome(ev: Mapping[str, Any]) -> str:
    return str(ev.get("detail", {}).get("outcome", ev["label"]))


def _provider(evs: Sequence[Mapping[str, Any]], y: float, x: _X, labels: _Labels) -> list[str]:
    out = []
    groups: dict[tuple[str, str, str, str], list[tuple[float, float]]] = {}
    for ev in evs:
        style = EFFECT_STYLE.get(_effect_outcome(ev), _OTHER_EFFECT)
        groups.setdefault(style, []).append((x(ev), y))
    for (shape, face, edge, _), points in groups.items():
        if shape == "x":
            out.append(_marks(shape, points, 9, face=face, width=2))
        else:
            out.append(_marks(shape, points, 10, face=face, edge=edge))
    dups = [ev for ev in evs if ev.get("detail", {}).get("duplicate")]
    out.append(_marks("o", [(x(ev), y) for ev in dups], 20, face="none", edge=_DUPLICATE, width=2))
    # a dashed arc over the lane from each duplicate back to the effect it repeats
    # (provider, seq): with several providers each numbers its own log
    by_seq = {
        (ev.get("detail", {}).get("provider"), ev.get("detail", {}).get("seq")): ev for ev in evs
    }
    arcs = []
    for ev in dups:
        detail = ev.get("detail", {})
        original = by_seq.get((detail.get("repeats_provider"), detail.get("repeats")))
        if original is None:
            continue
        x1, x2 = x(original), x(ev)
        lift = min(18.0, 6.0 + abs(x2 - x1) / 8)
        arcs.append(
            f"M{_n(x1)} {_n(y - 6)}Q{_n((x1 + x2) / 2)} {_n(y - 6 - 2 * lift)} {_n(x2)} {_n(y - 8)}"
        )
    if arcs:
        out.append(
            f'<path d="{"".join(arcs)}" fill="none" stroke="{_DUPLICATE}" stroke-width="1.3" '
            'stroke-dasharray="3 2"/>'
        )
    if dups:
        labels.add(
            f"{len(dups)} duplicate effect(s)",
            x(dups[0]),
            (y + 24, y - 15),
            size=11.5,
            fill=_DUPLICATE,
            bold=True,
            dx=0,
        )
    return out


def _ledger(evs: Sequence[Mapping[str, Any]], y: float, x: _X) -> list[str]:
    by_colour: dict[str, list[tuple[float, float]]] = {}
    for ev in evs:
        colour = LEDGER_COLOURS.get(str(ev["label"]), "#757575")
        by_colour.setdefault(colour, []).append((x(ev), y))
    return [_marks("|", pts, 21, face=c, width=2) for c, pts in by_colour.items()]


def _legend_entries(events: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(marker, face, edge, text) for each kind of mark the picture has, in a fixed order."""
    kinds = {str(ev["kind"]) for ev in events}
    entries = []
    if "hit" in kinds:
        entries.append(("|", "#37474f", "#37474f", "boundary hit"))
    if "crash" in kinds:
        entries.append(("X", _KILL, _KILL, "SIGKILL at the armed boundary"))
    outcomes = {_effect_outcome(ev) for ev in events if ev["kind"] == "effect"}
    for outcome, style in EFFECT_STYLE.items():
        if outcome in outcomes:
            entries.append(style)
    if outcomes - set(EFFECT_STYLE):
        entries.append(_OTHER_EFFECT)
    effects = [ev for ev in events if ev["kind"] == "effect"]
    if any(ev.get("detail", {}).get("duplicate") for ev in effects):
        entries.append(("O", "none", _DUPLICATE, "duplicate effect (2nd+ for one identity)"))
    if any(ev.get("detail", {}).get("repeats") is not None for ev in effects):
        entries.append(("arc", "none", _DUPLICATE, "arc: back to the effect it repeats"))
    labels = {str(ev["label"]) for ev in events if ev["lane"] == LEDGER_LANE}
    for name, colour in LEDGER_COLOURS.items():
        if name in labels:
            entries.append(("|", colour, colour, f"ledger: {name}"))
    return entries


def _legend_mark(shape: str, face: str, edge: str, x: float, y: float) -> str:
    if shape == "|":
        return _marks("|", [(x, y)], 13, face=face, width=2)
    if shape == "X":
        return _marks("X", [(x, y)], 9, face=face, width=2.6)
    if shape == "x":
        return _marks("x", [(x, y)], 8, face=face, width=2)
    if shape == "O":  # the duplicate ring
        return _marks("o", [(x, y)], 12, face="none", edge=edge, width=2)
    if shape == "arc":  # a duplicate's arc back to its original
        return (
            f'<path d="M{_n(x - 6)} {_n(y + 3)}Q{_n(x)} {_n(y - 7)} {_n(x + 6)} {_n(y + 3)}" '
            f'fill="none" stroke="{_esc(edge)}" stroke-width="1.3" stroke-dasharray="3 2"/>'
        )
    return _marks(shape, [(x, y)], 9, face=face, edge=edge)
