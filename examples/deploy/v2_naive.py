"""The outbox worker, v2_naive: ``python -m examples.deploy.v2_naive``."""

from examples.deploy.outbox import key_v2, run

if __name__ == "__main__":
    run(key_v2, stored_key=False)
