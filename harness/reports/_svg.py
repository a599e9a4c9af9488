"""Draw a case's timeline as an inline SVG with matplotlib (Agg backend, imported lazily).

One lane per worker incarnation (a bar from spawn to exit, a tick per boundary hit, a red X
for the SIGKILL, the way it ended), a lane for the provider (one marker per request, shaped
by outcome: fresh, deduplicated, expired-then-accepted, refused; a red ring around a
duplicate effect), and a lane for the ledger's audit trail (state changes) when it was read.
The SVG embeds its glyphs as paths and links nothing, so the HTML report stays self-contained.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness.reports._timeline import HARNESS_LANE, LEDGER_LANE, PROVIDER_LANE

#: marker, face colour, edge colour and legend text per provider outcome
EFFECT_STYLE: dict[str, tuple[str, str, str, str]] = {
    "fresh": ("o", "#2e7d32", "#1b5e20", "fresh effect"),
    "deduplicated": ("s", "#ffffff", "#1565c0", "deduplicated (same key)"),
    "expired_then_accepted": ("^", "#ef6c00", "#e65100", "expired, then accepted again"),
}
#: "path" draws every glyph as a path (the page needs no font at all); "none" keeps text as
#: text, in the reader's own sans-serif, at about a third of the size
SVG_FONTTYPE = "path"

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
}


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


def timeline_svg(
    events: Sequence[Mapping[str, Any]], *, title: str = "", salt: str = "timeline"
) -> str:
    """The timeline as an ``<svg>`` element (no XML prolog, no namespaced metadata)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    lanes = _lanes(events) or ["(no events)"]
    row = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    span = max([float(ev["t"]) for ev in events] + [1e-3])
    scale, unit = (1000.0, "ms") if span < 2.0 else (1.0, "s")

    def x(ev: Mapping[str, Any]) -> float:
        return float(ev["t"]) * scale

    with matplotlib.rc_context(
        {
            "svg.hashsalt": salt,
            "svg.fonttype": SVG_FONTTYPE,
            "font.size": 9,
            "font.family": "DejaVu Sans",
        }
    ):
        fig, ax = plt.subplots(figsize=(11.0, 1.5 + 0.55 * len(lanes)), dpi=96)
        try:
            _draw(ax, events, row, x)
            ax.set_yticks(list(row.values()), list(row.keys()))
            ax.set_ylim(-0.8, len(lanes) - 0.2)
            ax.set_xlim(-0.02 * span * scale, span * scale * 1.06)
            ax.set_xlabel(f"{unit} since the case started")
            ax.grid(axis="x", color="#eeeeee", linewidth=0.6)
            ax.set_axisbelow(True)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            if title:
                ax.set_title(title, loc="left", fontsize=10)
            handles = _legend_handles(events, Line2D)
            if handles:
                ax.legend(
                    handles=handles,
                    loc="upper center",
                    bbox_to_anchor=(0.5, -0.32 if len(lanes) < 4 else -0.22),
                    ncol=min(4, len(handles)),
                    frameon=False,
                    fontsize=8,
                )
            fig.tight_layout()
            buf = io.StringIO()
            fig.savefig(
                buf,
                format="svg",
                bbox_inches="tight",
                pad_inches=0.1,
                metadata={"Date": None, "Creator": None},
            )
        finally:
            plt.close(fig)
    return _inline(buf.getvalue(), prefix=f"{salt}-")


def _draw(ax: Any, events: Sequence[Mapping[str, Any]], row: dict[str, int], x: Any) -> None:
    by_lane: dict[str, list[Mapping[str, Any]]] = {}
    for ev in events:
        by_lane.setdefault(str(ev["lane"]), []).append(ev)
    _draw_restarts(ax, by_lane, row, x)
    for lane, evs in by_lane.items():
        y = row[lane]
        if lane == PROVIDER_LANE:
            _draw_provider(ax, evs, y, x)
        elif lane == LEDGER_LANE:
            colours = [LEDGER_COLOURS.get(str(ev["label"]), "#757575") for ev in evs]
            ax.scatter([x(ev) for ev in evs], [y] * len(evs), marker="|", s=260, c=colours)
        else:
            _draw_worker(ax, evs, y, x)


def _draw_restarts(
    ax: Any, by_lane: Mapping[str, Sequence[Mapping[str, Any]]], row: dict[str, int], x: Any
) -> None:
    """A dashed arrow from each incarnation's end to the next one's start: the restart."""
    workers = [lane for lane in row if lane not in (PROVIDER_LANE, LEDGER_LANE, HARNESS_LANE)]
    for before, after in itertools.pairwise(workers):
        ends = [ev for ev in by_lane[before] if ev["kind"] in ("exit", "crash")]
        starts = [ev for ev in by_lane[after] if ev["kind"] == "spawn"]
        if ends and starts and float(starts[0]["t"]) >= float(ends[-1]["t"]):
            ax.annotate(
                "",
                xy=(x(starts[0]), row[after]),
                xytext=(x(ends[-1]), row[before]),
                arrowprops={"arrowstyle": "->", "linestyle": "--", "color": "#90a4ae"},
            )


def _draw_worker(ax: Any, evs: Sequence[Mapping[str, Any]], y: int, x: Any) -> None:
    spawn = next((ev for ev in evs if ev["kind"] == "spawn"), evs[0])
    exit_ev = next((ev for ev in reversed(evs) if ev["kind"] == "exit"), evs[-1])
    outcome = str(exit_ev.get("detail", {}).get("outcome", ""))
    colour = OUTCOME_COLOURS.get(outcome, "#607d8b")
    ax.plot([x(spawn), x(exit_ev)], [y, y], color="#dde3e6", linewidth=6, solid_capstyle="butt")
    hits = [ev for ev in evs if ev["kind"] == "hit"]
    if hits:
        ax.scatter([x(ev) for ev in hits], [y] * len(hits), marker="|", s=170, c="#263238")
    ax.scatter([x(spawn)], [y], marker=">", s=70, c="#455a64", zorder=3)
    if spawn["kind"] == "spawn" and y >= 0:
        restart = "restart" if str(spawn["lane"]) != "w1" else "start"
        ax.annotate(
            restart,
            (x(spawn), y),
            xytext=(0, 9),
            textcoords="offset points",
            ha="left",
            fontsize=7,
            color="#455a64",
        )
    for ev in evs:
        if ev["kind"] == "crash":
            ax.scatter([x(ev)], [y], marker="X", s=160, c="#c62828", zorder=4)
            ax.annotate(
                str(ev["label"]),
                (x(ev), y),
                xytext=(6, -14),
                textcoords="offset points",
                fontsize=8,
                color="#c62828",
                fontweight="bold",
            )
    # anything else (a pause, a harness action, a flag the worker raised): a diamond each, and
    # one label per kind of event with its count, so repeats do not pile up into a smudge
    others: dict[str, list[Mapping[str, Any]]] = {}
    for ev in evs:
        if ev["kind"] not in ("spawn", "hit", "exit", "crash"):
            others.setdefault(str(ev["label"]), []).append(ev)
    for label, group in others.items():
        ax.scatter(
            [x(ev) for ev in group], [y] * len(group), marker="D", s=50, c="#6a1b9a", zorder=4
        )
        text = label + (f" \u00d7{len(group)}" if len(group) > 1 else "")
        ax.annotate(text, (x(group[0]), y), xytext=(4, 8), textcoords="offset points", fontsize=7)
    if exit_ev["kind"] == "exit" and outcome != "crashed_as_planned":
        ax.scatter([x(exit_ev)], [y], marker="o", s=60, c=colour, zorder=3)
        ax.annotate(
            str(exit_ev["label"]),
            (x(exit_ev), y),
            xytext=(6, 6),
            textcoords="offset points",
            fontsize=7,
            color=colour,
        )


def _draw_provider(ax: Any, evs: Sequence[Mapping[str, Any]], y: int, x: Any) -> None:
    for ev in evs:
        outcome = str(ev.get("detail", {}).get("outcome", ev["label"]))
        marker, face, edge, _ = EFFECT_STYLE.get(outcome, _OTHER_EFFECT)
        kwargs: dict[str, Any] = {"marker": marker, "s": 55, "zorder": 3}
        if marker == "x":
            kwargs["c"] = face
        else:
            kwargs.update(c=face, edgecolors=edge, linewidths=1.2)
        ax.scatter([x(ev)], [y], **kwargs)
        if ev.get("detail", {}).get("duplicate"):
            ax.scatter(
                [x(ev)],
                [y],
                marker="o",
                s=230,
                facecolors="none",
                edgecolors="#d50000",
                linewidths=1.6,
                zorder=4,
            )
    dups = [ev for ev in evs if ev.get("detail", {}).get("duplicate")]
    if dups:
        ax.annotate(
            f"{len(dups)} duplicate effect(s)",
            (x(dups[0]), y),
            xytext=(0, -17),
            textcoords="offset points",
            fontsize=8,
            color="#d50000",
            fontweight="bold",
        )


def _legend_handles(events: Sequence[Mapping[str, Any]], line2d: Any) -> list[Any]:
    def handle(marker: str, face: str, edge: str, text: str, size: float = 7.0) -> Any:
        return line2d(
            [],
            [],
            linestyle="none",
            marker=marker,
            markerfacecolor=face,
            markeredgecolor=edge,
            color=edge,
            markersize=size,
            label=text,
        )

    kinds = {str(ev["kind"]) for ev in events}
    handles = []
    if "hit" in kinds:
        handles.append(handle("|", "#37474f", "#37474f", "boundary hit", 9))
    if "crash" in kinds:
        handles.append(handle("X", "#c62828", "#c62828", "SIGKILL at the armed boundary", 9))
    outcomes = {
        str(ev.get("detail", {}).get("outcome", ev["label"]))
        for ev in events
        if ev["kind"] == "effect"
    }
    for outcome, style in EFFECT_STYLE.items():
        if outcome in outcomes:
            handles.append(handle(*style))
    if outcomes - set(EFFECT_STYLE):
        handles.append(handle(*_OTHER_EFFECT))
    if any(ev.get("detail", {}).get("duplicate") for ev in events if ev["kind"] == "effect"):
        handles.append(
            handle("o", "none", "#d50000", "duplicate effect (2nd+ for one identity)", 10)
        )
    labels = [str(ev["label"]) for ev in events if ev["lane"] == LEDGER_LANE]
    for name, colour in LEDGER_COLOURS.items():
        if name in labels:
            handles.append(handle("|", colour, colour, f"ledger: {name}", 9))
    return handles


_PROLOG = re.compile(r"^.*?(?=<svg)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_NAMESPACES = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')


_ID = re.compile(r'\bid="([^"]+)"')
_HREF = re.compile(r'(href=")#([^"]+)"')
_URL = re.compile(r"url\(#([^)]+)\)")


def _inline(svg: str, *, prefix: str) -> str:
    """Make matplotlib's SVG document an element for an HTML5 page.

    The XML prolog, DOCTYPE and RDF metadata go; so do the namespace declarations, which an
    HTML parser supplies itself for inline ``<svg>`` (and ``xlink:href``). Every id (glyphs,
    markers, clip paths) gets ``prefix``, so several pictures can share one page.
    """
    svg = _PROLOG.sub("", svg, count=1)
    svg = _METADATA.sub("", svg)
    ids = set(_ID.findall(svg))
    svg = _ID.sub(lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = _HREF.sub(
        lambda m: f'{m.group(1)}#{prefix}{m.group(2)}"' if m.group(2) in ids else m.group(0), svg
    )
    svg = _URL.sub(
        lambda m: f"url(#{prefix}{m.group(1)})" if m.group(1) in ids else m.group(0), svg
    )
    head, sep, rest = svg.partition(">")
    head = _NAMESPACES.sub("", head)
    return head + ' role="img"' + sep + rest
