"""The engine: what runs a campaign. Not public: nothing here is documented for users.

What lives where (the Jepsen split: generator, nemesis, checker, store, report):

- plan and schedule: ``scenario`` (scenario files), ``_overrides`` (``--set``), ``schedule``
  (steps and cases), ``_plan`` (certify's plan, refusing a bad one), ``workload`` (runs and
  roster from a seed), ``credentials``;
- running cases: ``campaign`` (its providers, one supervisor, case after case),
  ``_providers`` (several named providers: ``[provider.NAME]``), ``_case`` (one case's
  context), ``_case_result``, ``parallel`` and ``_jobpipe`` (cases in forked
  jobs), ``sweep`` and ``explore`` (systematic and Hypothesis-drawn schedules),
  ``determinism`` (rerun and compare), ``outcome`` (one rule from results to exit status);
- processes: ``supervisor`` (fork, arm, kill, reap), ``_tree`` (a worker's process tree),
  ``_leftovers`` (what outlived its worker or case: found, named, stopped),
  ``_boundary`` (the boundary tracer behind ``harness.boundary``), ``lifecycle`` and
  ``settle`` (workers the harness did not write), ``_faketime`` (time in a child);
- the store: ``trace`` (one JSON-lines file per case), ``_db`` (case databases: make, copy,
  snapshot, restore, drop), ``_scratch`` and ``_owner`` (work dirs, what a killed run left),
  ``_room`` (a write the machine refused: the case unknown, never the worker's fault),
  ``_secrets`` (never print a secret), ``_raised`` (why a worker died by raising).

The engine imports no subject (``harness.reference``, ``harness.mutants``): it finds them by
``module:attr`` as it finds a user's system (``harness.systems``).
"""
