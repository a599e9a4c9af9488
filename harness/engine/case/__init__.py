"""One case's journey, as a pipeline of stages, and the campaign that sequences them.

``prepare`` (database, clock, provider epochs, workload), ``run`` (the incarnations and their
faults), ``observe`` (ledger, effects, trace), ``judge`` (invariants, landings, verdict) and
``record`` (the ``CaseResult``); ``campaign`` starts the providers and runs case after case,
``parallel`` and ``_jobpipe`` run them in forked jobs. May import every room below it and
``results``; never ``search``.
"""
