"""The reference system: a ledger and worker that deliver exactly once across crashes.

- ``schema``: the execution ledger, delivery ledger, delivery queue and audit trail.
- ``ledger``: every durable step, each in its own transaction, fenced by lease epoch.
- ``provider_client``: the HTTP adapter to a provider, classifying every answer.
- ``worker``: the safe sequence, with a ``boundary()`` at each SPEC crash point.
"""
