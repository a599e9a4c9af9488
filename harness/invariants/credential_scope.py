"""``credential_scope``: nothing is sent outside the credential's destination scope, and the
audit trail names the credential and scope of every send.

Why: a worker that restarts with the wrong roster, or a shared credential with a broad scope,
can post to a destination nobody granted. The provider's own refusals (outcome ``refused``)
prove the worker tried; an accepted effect whose destination matches none of the globs the
scenario granted to its credential proves the scope was wider than promised. And when an
operator has to answer "who sent this, with what right", the ``attempt`` events of the audit
trail must say which credential and scope were used, matching what the provider saw.

Judged from the provider's log (which credential it saw on every request) and the scopes the
harness granted (``Policy.credential_scopes``), never from the worker's own account: an audit
event naming one credential while the provider saw another fails, and so does an audit event
naming a scope other than the one the harness granted the credential it names (an operator
reading the trail would be told a right the worker never had).
"""

from __future__ import annotations

from collections import Counter
from fnmatch import fnmatchcase

from harness.engine.plan.credentials import scope_text
from harness.invariants._evidence import effect_evidence
from harness.invariants._model import CheckResult, Observation, Status, need

NAME = "credential_scope"


def check(obs: Observation) -> CheckResult:
    effects = need(obs.effects, "provider effect log")
    ledger = need(obs.ledger, "ledger")
    # An empty mapping is a scenario that declared no scopes, not one that granted nothing.
    scopes = obs.policy.credential_scopes if obs.policy is not None else None
    scopes = scopes or None
    problems: list[dict[str, object]] = []
    undecided: list[dict[str, object]] = []

    for eff in effects:
        if eff.outcome == "refused":
            problems.append(
                {
                    "problem": "the provider refused a send outside the credential's scope",
                    "effect": effect_evidence(eff, obs),
                }
            )
    accepted = [e for e in effects if e.accepted]
    if scopes is not None:
        for eff in accepted:
            globs = scopes.get(eff.credential_id or "")
            if globs is None:
                undecided.append(
                    {
                        "problem": "sent with a credential the scenario did not declare",
                        "credential_id": eff.credential_id,
                        "effect": eff.to_json(),
                    }
                )
            elif not any(fnmatchcase(eff.destination, g) for g in globs):
                problems.append(
                    {
                        "problem": "accepted outside the credential's declared scope",
                        "credential_id": eff.credential_id,
                        "scope": list(globs),
                        "effect": effect_evidence(eff, obs),
                    }
                )

    attempts = [a for a in ledger.audit if a.event == "attempt"]
    audited_credentials: dict[str, set[str]] = {}
    for a in attempts:
        granted = scopes.get(a.credential_id or "") if scopes is not None else None
        if not a.credential_id or not a.destination_scope:
            problems.append(
                {
                    "problem": "audit 'attempt' event does not name credential and scope",
                    "event_id": a.event_id,
                    "delivery_id": a.delivery_id,
                    "credential_id": a.credential_id,
                    "destination_scope": a.destination_scope,
                }
            )
        else:
            audited_credentials.setdefault(a.delivery_id, set()).add(a.credential_id)
            if granted is not None and a.destination_scope != scope_text(granted):
                problems.append(
                    {
                        "problem": "the audit names a scope other than the one granted to its "
                        "credential",
                        "event_id": a.event_id,
                        "delivery_id": a.delivery_id,
                        "credential_id": a.credential_id,
                        "audited_scope": a.destination_scope,
                        "granted_scope": list(granted),
                    }
                )
    # Every request the provider saw (refused ones too) was made with a credential the audit
    # names for that delivery, if the audit names any.
    for eff in effects:
        named = audited_credentials.get(eff.delivery_id)
        if named and eff.credential_id not in named:
            problems.append(
                {
                    "problem": "the audit names a different credential than the provider saw",
                    "audited": sorted(named),
                    "effect": effect_evidence(eff, obs),
                }
            )

    checked = {
        "requests": len(effects),
        "refused": sum(1 for e in effects if e.outcome == "refused"),
        "accepted": len(accepted),
        "accepted_by_credential": dict(
            sorted(Counter(e.credential_id or "" for e in accepted).items())
        ),
        "declared_scopes": {k: list(v) for k, v in scopes.items()} if scopes is not None else None,
        "audited_attempts": len(attempts),
    }
    if problems:
        return CheckResult(
            Status.FAIL,
            f"{len(problems)} send(s) outside scope or not audited with credential and scope",
            {"problems": problems, "undecided": undecided, **checked},
        )
    if undecided:
        return CheckResult(
            Status.UNKNOWN,
            f"{len(undecided)} accepted send(s) used a credential with no declared scope",
            {"undecided": undecided, **checked},
        )
    scope_note = (
        "inside the declared scopes"
        if scopes is not None
        else "no refusals (no declared scopes recorded; the provider's check is the only one)"
    )
    return CheckResult(
        Status.PASS,
        f"{len(accepted)} accepted send(s) {scope_note}; {len(attempts)} attempt(s) audited",
        checked,
    )
