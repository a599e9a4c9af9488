"""Celery acking late, requeuing on a lost child: ``python -m examples.celery_worker.fixed``."""

from examples.celery_worker.app import run

if __name__ == "__main__":
    run(fixed=True)
