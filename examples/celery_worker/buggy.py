"""Celery with its defaults: ``python -m examples.celery_worker.buggy``."""

from examples.celery_worker.app import run

if __name__ == "__main__":
    run(fixed=False)
