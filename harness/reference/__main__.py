"""``python -m harness.reference``: the reference worker as a program, for the command route.

Run by the harness as ``--system 'cmd:python -m harness.reference'``: it reads its settings
from the environment the harness gives it, exactly as a user's own worker program would.
"""

from harness.reference.worker import ReferenceWorker
from harness.worker_config import WorkerConfig

ReferenceWorker(WorkerConfig.from_env()).run()
