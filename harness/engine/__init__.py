"""The engine: what runs a campaign. Not public: nothing here is documented for users.

One room per stage of a case's life, lowest first; a room imports only itself and the rooms
before it (``tests/test_architecture.py`` holds the order, ``ENGINE_ROOMS``):

- ``store``: where a case's things are kept, and kept apart: case databases (``_db``),
  work dirs and what a killed run left (``_scratch``, ``_owner``, ``_paths``), a write the
  machine refused (``_room``), secrets never printed (``_secrets``), the trace of each case
  (``trace``) and the timeline read back from it (``timeline``).
- ``process``: worker processes: fork, arm, kill, reap (``supervisor``), the process tree,
  the wall around a worker, its birth in a cgroup, the keeper and lifeline, CPU waits, the
  boundary tracer behind ``harness.boundary`` and the near-side hooks, daemons that settle on
  their own timers, fake time, what outlived its worker, far-side crash points.
- ``plan``: what to run: scenario files, ``--set``, steps and cases (``schedule``), certify's
  plan and the refusal of a bad one, the workload drawn from a seed, credentials, providers'
  specs, the calls into a user's glue.
- ``results`` (one module, not a room): the types the engine hands to its readers:
  ``CampaignSettings``, ``CampaignResult``, ``CaseResult``, ``StepRecord``, ``Landing``.
- ``case``: one case's journey as a pipeline of stages, and ``Campaign``, which only
  sequences them; cases in forked jobs (``parallel``, ``_jobpipe``).
- ``search``: many cases chosen by what earlier ones showed: every boundary (``sweep``),
  Hypothesis-drawn schedules (``explore``), a recovery sample, reruns of one seed
  (``determinism``), and which planned steps landed.

The engine imports no subject (``harness.reference``, ``harness.mutants``): it finds them by
``module:attr`` as it finds a user's system (``harness.systems``). It never imports
``harness.reports`` or the command line: it hands its results out.
"""
