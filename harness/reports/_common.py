"""What every rendered format says the same way: the headline, the matrix, case labels."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.invariants import _model, looks

SYMBOL = {"pass": "✅", "fail": "❌", "unknown": "⚠️", "gap": "🕳️", "flaky": "🔀", None: "-"}
#: an invariant result's symbol by look (``look``): a not-judged check is neither ❌ nor ⚠️
LOOK_SYMBOL = {"pass": "✅", "fail": "❌", "undecided": "⚠️", "not_judged": "⚪", None: "-"}


def headline(report: Mapping[str, Any]) -> tuple[str, str]:
    """``(level, sentence)``: level is ``fail``, ``unknown``, ``gap`` or ``pass``."""
    s = report["summary"]
    partial = " so far" if report.get("partial") else ""
    flaky_failed = flaky_failures(report)
    if s["failed"] or flaky_failed:
        also = f", {flaky_failed} flaky" if not s["failed"] else ""
        return "fail", (
            f"{s['failed'] + flaky_failed} of {s['cases']} case(s) violate an invariant"
            f"{also}{partial}"
        )
    if s.get("gaps"):
        return "gap", (
            f"coverage gap: in {s['gaps']} of {s['cases']} case(s) a planned step did not land"
            f"{partial}"
        )
    if s["boundaries_uncovered"]:
        return "gap", "coverage gap: some documented boundaries were never reached"
    sweep = report.get("sweep")
    if isinstance(sweep, Mapping) and (
        sweep.get("pairs_missing") or sweep.get("boundaries_unreached")
    ):
        return "gap", "coverage gap: the sweep missed pairs or boundaries its plan promised"
    if s["unknown"] or s.get("flaky"):
        why = [f"{s['unknown']} of {s['cases']} case(s) undecided"] if s["unknown"] else []
        if s.get("flaky"):  # its runs of one seed disagreed: never a pass
            why.append(f"{s['flaky']} of {s['cases']} case(s) flaky (runs of one seed disagreed)")
        return "unknown", f"inconclusive: {'; '.join(why)}{partial}"
    every = "every invariant"
    seen = looks.judged(report.get("cases", []))
    if seen.not_judged:
        every = f"every judged invariant ({len(seen.judged)} of {seen.total} judged)"
    if report.get("partial"):
        return "partial", f"all {s['cases']} case(s) run so far hold {every}"
    return "pass", f"all {s['cases']} case(s) hold {every}"


def flaky_failures(report: Mapping[str, Any]) -> int:
    """Flaky cases one of whose runs failed: that failure stands (``outcome.judge``)."""
    return sum(
        1
        for c in report.get("cases", [])
        if c.get("verdict") == "flaky"
        and any(r.get("status") == "fail" for r in c.get("invariants", {}).values())
    )


def recovery_sentence(report: Mapping[str, Any]) -> str | None:
    """What a certify's seeded sample of crashes during recovery was (``recovery_sample``,
    ``harness.engine.search.recovery``); None for a campaign that ran none."""
    record = report.get("recovery_sample")
    if not isinstance(record, Mapping):
        return None
    return (
        f"crash during recovery (depth 2): {record['planned']} of {record['possible']}"
        f" possible schedule(s) sampled with seed {record['seed']}, {record['landed']} landed;"
        " a sweep with --depth 2 runs every one"
    )


def partial_note(report: Mapping[str, Any]) -> str | None:
    """The sentence that says a report is partial, and how to finish it; None if complete."""
    if not report.get("partial"):
        return None
    s = report["summary"]
    planned = len(report.get("plan", {}).get("cases", [])) or s["cases"] + s.get("not_run", 0)
    text = (
        f"partial report: {s['cases']} of {planned} planned case(s) ran before the campaign stopped"
    )
    if report.get("resume"):
        text += f"; finish it with `{report['resume']}`"
    return text


def invariant_names(report: Mapping[str, Any]) -> list[str]:
    names = list(report["summary"].get("invariants_checked", []))
    for case in report["cases"]:
        names += [n for n in case["invariants"] if n not in names]
    return names


def case_where(case: Mapping[str, Any]) -> str:
    """``boundary#hit`` for a single crash, ``baseline``, else the case id itself."""
    case_id = str(case["id"])
    if case.get("boundary") is not None and case_id == f"crash@{case['boundary']}#{case['hit']}":
        return f"{case['boundary']}#{case['hit']}"
    return case_id


def not_passing(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in report["cases"] if c["verdict"] != "pass"]


def compact(value: Any, *, limit: int | None = None) -> str:
    """Compact, key-sorted JSON; cut at ``limit`` characters with a marker."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    if limit is not None and len(text) > limit:
        return text[:limit] + f"… ({len(text) - limit} more characters)"
    return text


def workers_line(case: Mapping[str, Any]) -> str:
    parts = []
    for w in case.get("workers", []):
        how = str(w["outcome"])
        if w["outcome"] == "crashed_as_planned" and w.get("boundary"):
            how = f"killed at {w['boundary']}#{w['hit']}"
        elif w.get("signal"):
            how += f" by {w['signal']}"
        elif w.get("exit_code"):
            how += f" with exit code {w['exit_code']}"
        left = int(w.get("stragglers") or 0)
        said = f", leaving {left} straggler(s) the harness killed" if left else ""
        parts.append(
            f"{w['worker']} (pid {w['pid']}) {how} after {float(w['duration_s']):.2f}s{said}"
        )
    return " → ".join(parts)


def straggler_lines(report: Mapping[str, Any]) -> list[str]:
    """One sentence per process of a case that outlived its worker or the case (each was
    stopped then), naming its pid, command line and what it held. Every format shows them:
    a worker whose daemon outlives it would outlive a real deployment's restart too, and
    the case cannot pass."""
    return [line for case in report["cases"] for line in case_straggler_lines(case)]


def case_straggler_lines(case: Mapping[str, Any]) -> list[str]:
    """A case's leftovers (``leftovers``), or for a report written before they were named,
    its workers' straggler counts."""
    named = case.get("leftovers")
    if named:
        return [f"{case['id']}: {leftover_sentence(p)}" for p in named]
    return [
        f"{case['id']}: worker {w['worker']} (pid {w['pid']}) left {w['stragglers']}"
        " process(es) running after it ended; the harness killed them"
        for w in case.get("workers", [])
        if w.get("stragglers")
    ]


def leftover_sentence(left: Mapping[str, Any]) -> str:
    """``pid 41 (python -m app) of worker w1 was still running ...; the harness killed it``."""
    fate = "the harness killed it" if left.get("stopped") else "the harness could NOT kill it"
    return f"pid {left['pid']} ({left['command']}) {left['held']}; {fate}"


#: how a case note that carries the provider's own reasons starts
#: (``harness.engine.case._provider_reasons``: ``provider: ...`` or ``provider NAME: ...``)
PROVIDER_NOTE = re.compile(r"^provider(?: ([\w.-]+))?: ")


def provider_reasons(report: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """Every distinct provider-reason note of the report, with the cases that have it, in
    first-seen order: what the providers refused and why, for every case (a passing one
    included: a worker that recovered from a refusal still sent what was refused)."""
    found: dict[str, list[str]] = {}
    for case in report["cases"]:
        for note in case["notes"]:
            said = PROVIDER_NOTE.match(note)
            if said is not None:
                text = (f"{said.group(1)}: " if said.group(1) else "") + note[said.end() :]
                found.setdefault(text, []).append(str(case["id"]))
    return list(found.items())


def accepted_cell(fx: Mapping[str, Any], sep: str = "/") -> str:
    """``12/6`` for a matrix cell: accepted effects over intended deliveries, and how many of
    the accepted nobody intended (``12/6 (6 unintended)``) when any were."""
    cell = f"{fx['accepted']}{sep}{fx['intended']}"
    return cell + (f" ({fx['unintended']} unintended)" if fx.get("unintended") else "")


def effects_line(case: Mapping[str, Any]) -> str:
    fx = case["effects"]
    text = f"{fx['accepted']} accepted of {fx['intended']} intended"
    if fx.get("unintended"):  # absent in older reports; 0 says nothing a reader must act on
        text += f", {fx['unintended']} to an intended recipient under ids nobody intended"
    by = fx.get("by_outcome")
    if by:
        text += " (" + ", ".join(f"{n} {k}" for k, n in sorted(by.items())) + ")"
    providers = fx.get("by_provider")
    if isinstance(providers, Mapping) and providers:  # several providers, each apart
        text += "; " + ", ".join(
            f"{name}: {counts.get('accepted', 0)} accepted of {counts.get('requests', 0)}"
            " request(s)"
            + (
                f" ({counts['on_intended']} on intended deliveries,"
                f" {counts.get('unintended', 0)} unintended)"
                if "on_intended" in counts
                else ""
            )
            for name, counts in providers.items()
            if isinstance(counts, Mapping)
        )
    return text


# -- how an invariant result looks: failed, undecided, not judged ------------------------------

#: summary prefix of an *unknown* that is a blind spot of the system under test (no ledger
#: adapter, no audit query), not a finding
NOT_JUDGED = _model.NOT_JUDGED
LOOKS = looks.LOOKS
LOOK_WORD = looks.LOOK_WORD


def look(inv: Mapping[str, Any]) -> str:
    """``fail``, ``undecided``, ``not_judged`` or ``pass``: what a result means to a reader
    (one rule for every route: ``harness.invariants.looks``)."""
    return looks.look(inv)


def reason(inv: Mapping[str, Any]) -> str:
    """The summary without the ``[not judged]`` tag the look already says."""
    return looks.reason(str(inv.get("summary", "")))


def by_look(case: Mapping[str, Any]) -> dict[str, list[tuple[str, Mapping[str, Any]]]]:
    """The case's invariants grouped by look (every look present, in ``LOOKS`` order)."""
    groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {k: [] for k in LOOKS}
    for name, inv in case["invariants"].items():
        groups[look(inv)].append((name, inv))
    return groups


def failed_names(case: Mapping[str, Any]) -> list[str]:
    """Only the invariants that failed: what a title or a count of problems may list."""
    return [n for n, inv in case["invariants"].items() if look(inv) == "fail"]


def not_judged_groups(case: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """``(why, names)`` for the not-judged invariants, one entry per distinct why: a system
    without a ledger adapter leaves seven checks blind for one reason, said once."""
    groups: dict[str, list[str]] = {}
    for name, inv in case["invariants"].items():
        if look(inv) == "not_judged":
            groups.setdefault(looks.why_not_judged(str(inv.get("summary", ""))), []).append(name)
    return list(groups.items())


def judged_sentence(report: Mapping[str, Any]) -> str:
    """How many invariants the report judged and why the rest were not (every format says
    it, so a pass over checks the system gave nothing to judge by never reads as complete)."""
    return looks.judged(report.get("cases", [])).sentence()


def title_parts(case: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(look, text)`` pieces of a case's one-line title: the id and verdict, the failed
    invariants by name, then undecided and not-judged ones, each in its own look, so a
    blind spot never reads as a failure."""
    groups = by_look(case)
    parts = [("head", f"{case['id']}: {case['verdict']}")]
    if groups["fail"]:
        parts.append(("fail", "failed: " + ", ".join(n for n, _ in groups["fail"])))
    if groups["undecided"]:
        parts.append(("undecided", "undecided: " + ", ".join(n for n, _ in groups["undecided"])))
    if groups["not_judged"]:
        parts.append(("not_judged", f"{len(groups['not_judged'])} not judged"))
    return parts


def title_text(case: Mapping[str, Any]) -> str:
    """``title_parts`` as plain text."""
    head, *rest = title_parts(case)
    return head[1] + (" (" + "; ".join(text for _, text in rest) + ")" if rest else "")


# -- what a failure was about: duplicated and lost destinations --------------------------------


@dataclass(frozen=True)
class Duplicate:
    """One duplicate effect and the earlier effect of the same identity it repeats."""

    #: the provider's log sequence number of the duplicate, and of the effect it repeats
    seq: int | None
    repeats: int | None
    run_id: str
    destination: str
    #: the idempotency keys of the duplicate and of the original (a new key per attempt is
    #: the usual cause, so both are said when they differ)
    key: str | None
    original_key: str | None
    outcome: str
    #: with several providers (``[provider.NAME]``): the provider of the duplicate and of
    #: the effect it repeats (each provider numbers its own log); None with one provider
    provider: str | None = None
    repeats_provider: str | None = None


def _seq(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def duplicates(case: Mapping[str, Any]) -> list[Duplicate]:
    """Every duplicate effect of a case, each with the effect it repeats.

    ``exactly_once_effect``'s evidence groups accepted effects by recipient (its normal form,
    so two spellings of one address count as one), and comes first; the timeline's effect
    events (``detail.duplicate``, ``repeats``) add any it does not list, and serve alone for a
    report whose evidence was cut."""
    found: list[Duplicate] = []
    #: (provider, seq) of each duplicate found in the evidence (the provider only with
    #: several providers, whose seq numbers are each their own)
    seen: set[tuple[str, int]] = set()
    evidence = case["invariants"].get("exactly_once_effect", {})
    if evidence.get("status") == "fail":
        for group in evidence.get("evidence", {}).get("duplicates", []) or []:
            effects = sorted(
                (e for e in group.get("effects", []) if isinstance(e, Mapping)),
                key=lambda e: _seq(e.get("seq")) or 0,
            )
            if len(effects) < 2:
                continue
            first = effects[0]
            several = bool(group.get("providers"))
            for eff in effects[1:]:
                seq = _seq(eff.get("seq"))
                found.append(
                    Duplicate(
                        seq=seq,
                        repeats=_seq(first.get("seq")),
                        run_id=str(group.get("run_id", eff.get("run_id", ""))),
                        destination=str(eff.get("destination", group.get("destination", ""))),
                        key=_str_or_none(eff.get("idempotency_key")),
                        original_key=_str_or_none(first.get("idempotency_key")),
                        outcome=str(eff.get("outcome", "")),
                        provider=_str_or_none(eff.get("provider")) if several else None,
                        repeats_provider=_str_or_none(first.get("provider")) if several else None,
                    )
                )
                if seq is not None:
                    seen.add((str(eff.get("provider") or "") if several else "", seq))
    events = [e for e in case.get("timeline") or () if e.get("kind") == "effect"]
    by_seq = {_seq(e["detail"].get("seq")): e["detail"] for e in events if e.get("detail")}
    for ev in events:
        detail = ev.get("detail") or {}
        seq = _seq(detail.get("seq"))
        mark = (str(detail.get("provider") or ""), seq) if seq is not None else None
        if not detail.get("duplicate") or (mark is not None and mark in seen):
            continue
        repeats = _seq(detail.get("repeats"))
        if repeats is None:  # a report written before the builder said which one
            ident = (detail.get("run_id"), detail.get("destination"))
            repeats = next(
                (
                    s
                    for s, d in by_seq.items()
                    if s is not None
                    and d.get("nth_accepted") == 1
                    and (d.get("run_id"), d.get("destination")) == ident
                ),
                None,
            )
        original = by_seq.get(repeats, {}) if repeats is not None else {}
        found.append(
            Duplicate(
                seq=seq,
                repeats=repeats,
                run_id=str(detail.get("run_id", "")),
                destination=str(detail.get("destination", "")),
                key=_str_or_none(detail.get("idempotency_key")),
                original_key=_str_or_none(original.get("idempotency_key")),
                outcome=str(detail.get("outcome", "")),
                provider=_str_or_none(detail.get("provider")),
                repeats_provider=_str_or_none(detail.get("repeats_provider")),
            )
        )
    return found


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def duplicated_destinations(case: Mapping[str, Any]) -> list[str]:
    """The destinations that got more than one effect, each once, in order."""
    return list(dict.fromkeys(d.destination for d in duplicates(case)))


def repeat_sentence(dup: Duplicate) -> str:
    """``effect #7 repeats #3 (same destination X, key K)``: the Markdown and JUnit wording."""
    return f"effect {effect_ref(dup.seq, dup.provider)} repeats" + (
        f" {effect_ref(dup.repeats, dup.repeats_provider, earlier=True)} ({repeat_because(dup)})"
    )


def effect_ref(seq: int | None, provider: str | None, *, earlier: bool = False) -> str:
    """``#7``, or ``mail#7`` with several providers (each numbers its own log)."""
    if seq is None:
        return "an earlier effect" if earlier else "an effect"
    return f"{provider or ''}#{seq}"


def repeat_because(dup: Duplicate) -> str:
    """Why the two effects are one message twice: the destination, and the keys used."""
    text = f"same destination {dup.destination}"
    if dup.key and dup.original_key and dup.key != dup.original_key:
        text += f", new key {dup.key} (the first had {dup.original_key})"
    elif dup.key:
        text += f", key {dup.key}"
    if dup.outcome == "expired_then_accepted":
        text += ", accepted again after the key's window expired"
    return text


def lost(case: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``no_silent_loss``'s lost deliveries (``run_id``, ``destination``, ``why``), when it
    failed and its evidence names them."""
    inv = case["invariants"].get("no_silent_loss", {})
    if inv.get("status") != "fail":
        return []
    rows = inv.get("evidence", {}).get("lost", []) or []
    return [r for r in rows if isinstance(r, Mapping) and r.get("destination") is not None]


def lost_sentence(row: Mapping[str, Any]) -> str:
    """``destination X (run R) never got its effect: why``."""
    text = f"{row['destination']}"
    if row.get("run_id"):
        text += f" (run {row['run_id']})"
    text += " never got its effect"
    return text + (f": {row['why']}" if row.get("why") else "")
