"""RQ with its defaults: ``python -m examples.rq_worker.buggy``."""

from examples.rq_worker.app import run

if __name__ == "__main__":
    run(fixed=False)
