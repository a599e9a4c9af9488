"""The outbox worker, v1_graceful: ``python -m examples.deploy.v1_graceful``."""

from examples.deploy.outbox import key_v1, run

if __name__ == "__main__":
    run(key_v1, on_sigterm="finish")
