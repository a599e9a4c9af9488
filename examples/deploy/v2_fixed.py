"""The outbox worker, v2_fixed: ``python -m examples.deploy.v2_fixed``."""

from examples.deploy.outbox import key_v2, run

if __name__ == "__main__":
    run(key_v2, stored_key=True)
