"""Recovery hook: RQ's own stalled-job sweep, ``StartedJobRegistry.cleanup()``.

It moves a job whose heartbeat expired (at least 60 s after it started) to the failed
registry, or back to the queue if it has retries left."""

from rq import Queue
from rq.registry import StartedJobRegistry

from examples.rq_worker.app import connect, queue_name
from harness.worker_config import WorkerConfig

if __name__ == "__main__":
    queue = Queue(queue_name(WorkerConfig.from_env()), connection=connect())
    StartedJobRegistry(queue=queue).cleanup()
