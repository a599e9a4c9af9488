"""``restore_no_replay``: after the database is restored from a backup, no side effect is
replayed.

Why: a backup taken before a send was acknowledged brings back ``pending`` rows for messages
the provider already accepted. A worker that trusts the restored ledger sends them again; one
that reconciles first (asks the provider by key, or relies on a key still inside its window)
does not. So for each ``restore`` the harness recorded in the trace, no (run, destination)
that had an accepted effect before the restore may get another accepted effect after it.

The cut between "before" and "after" is, best first: the provider's sequence number recorded
in the event (``detail.effects_seq``: the last effect logged before the restore), the
provider's clock reading recorded in it (``detail.provider_t``), or the event's wall time put
on the provider's clock (see ``_evidence``), compared with each effect's ``received_at``.
"""

from __future__ import annotations

from harness.invariants._attribution import unless_unattributed
from harness.invariants._evidence import detail_of, effect_evidence, provider_times, restore_seq
from harness.invariants._model import (
    CheckResult,
    EffectRow,
    Observation,
    Status,
    need,
    recipient,
)

NAME = "restore_no_replay"


def check(obs: Observation) -> CheckResult:
    effects = need(obs.effects, "provider effect log")
    at = provider_times(obs.trace, start_offset=obs.provider_clock_offset_s)
    restores = [(ev, at[i]) for i, ev in enumerate(obs.trace) if ev.event == "restore"]
    if not restores:
        return CheckResult(Status.PASS, "no restore in this case", {"restores": 0})
    accepted = sorted((e for e in effects if e.accepted and e.attributed), key=lambda e: e.seq)
    problems: list[dict[str, object]] = []
    cuts: list[dict[str, object]] = []
    flagged: set[tuple[str, int]] = set()
    for ev, t_restore in restores:
        detail = detail_of(ev)
        seq_cut, provider_t = detail.get("effects_seq"), detail.get("provider_t")
        cut: dict[str, object]
        if isinstance(seq_cut, int):
            cut = {"by": "provider seq", "effects_seq": seq_cut}
        elif isinstance(provider_t, int | float):
            t_restore = float(provider_t)
            cut = {"by": "provider time (recorded)", "t": t_restore}
        else:
            cut = {"by": "provider time (from the trace)", "t": t_restore}
        cuts.append({**cut, "detail": detail})
        earlier: dict[tuple[str, str], EffectRow] = {}
        for eff in accepted:
            pair = (eff.run_id, recipient(obs, eff.destination))
            own_cut = restore_seq(detail, eff.provider) if isinstance(seq_cut, int) else None
            before = (
                eff.seq <= own_cut if isinstance(own_cut, int) else eff.received_at <= t_restore
            )
            if before:
                earlier.setdefault(pair, eff)
            elif pair in earlier and (eff.provider, eff.seq) not in flagged:
                flagged.add((eff.provider, eff.seq))
                problems.append(
                    {
                        "run_id": eff.run_id,
                        "destination": eff.destination,
                        "restore": cut,
                        "accepted_before_restore": earlier[pair].to_json(),
                        "replayed_after_restore": effect_evidence(eff, obs),
                    }
                )
    if problems:
        return CheckResult(
            Status.FAIL,
            f"{len(problems)} effect(s) replayed after a restore from backup",
            {"replayed": problems, "restores": cuts},
        )
    passed = CheckResult(
        Status.PASS,
        f"no effect replayed after {len(restores)} restore(s)",
        {"restores": cuts, "accepted_effects": len(accepted)},
    )
    return unless_unattributed(passed, obs, "a replay after the restore")
