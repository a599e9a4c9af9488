"""The outbox worker, v1: ``python -m examples.deploy.v1``."""

from examples.deploy.outbox import key_v1, run

if __name__ == "__main__":
    run(key_v1)
