"""RQ with retries and a sweep for abandoned jobs: ``python -m examples.rq_worker.fixed``."""

from examples.rq_worker.app import run

if __name__ == "__main__":
    run(fixed=True)
