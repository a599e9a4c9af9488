"""A program that says how it was started: before its own imports it notes whether the
library it imports (``colorsys``, which the harness never imports for itself) was loaded
already, and whether its own helper module was (never: the harness imports no user code);
then it posts each job once, with a stable webhook id, and writes what a fresh interpreter
would show (its name, argv, path, signals, exit handler) to ``PROBE_OUT``.
"""

import sys

PRELOADED = "colorsys" in sys.modules
OWN_LOADED = bool({"tests._warm_probe_helper", "_warm_probe_helper"} & set(sys.modules))

import atexit  # noqa: E402
import colorsys  # noqa: E402, F401 - the library a warm start imports ahead
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sqlite3  # noqa: E402

import requests  # noqa: E402

try:  # python -m tests._warm_probe_worker
    from tests._warm_probe_helper import WORK
except ImportError:  # python tests/_warm_probe_worker.py: its own directory is on the path
    from _warm_probe_helper import WORK  # type: ignore[no-redef]


def main():
    facts = {
        "preloaded": PRELOADED,
        "own_loaded": OWN_LOADED,
        "name": __name__,
        "argv": sys.argv,
        "path0": sys.path[0],
        "sigint_default": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "sigpipe_ignored": signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN,
        "pid": os.getpid(),
    }
    out = os.environ["PROBE_OUT"]
    atexit.register(lambda: _append(out, {"atexit": os.getpid()}))
    _append(out, facts)
    conn = sqlite3.connect(os.environ["DATABASE_URL"].removeprefix("sqlite:///"), timeout=30)
    for run_id, payload, destination in conn.execute(WORK).fetchall():
        reply = requests.post(  # SEND
            os.environ["WEBHOOK_URL"],
            json={"destination": destination, "run_id": run_id, "order": json.loads(payload)},
            headers={
                "Authorization": f"Bearer {os.environ['WEBHOOK_TOKEN']}",
                "webhook-id": f"{run_id}:{destination}",
            },
            timeout=10,
        )
        reply.raise_for_status()
    sys.exit(0)


def _append(path, facts):
    with open(path, "a") as f:
        f.write(json.dumps(facts) + "\n")


if __name__ == "__main__":
    main()
