"""What a user writes by hand instead of crash-harness: the outbox worker, killed once after
its first accepted POST, restarted on the same database, and the provider's count checked.

Same libraries as ``examples/outbox/outbox_worker.py`` (SQLAlchemy, requests) and the same
six messages; the provider is a threaded ``http.server`` on loopback that counts POSTs.
Exits 1 when a message arrived twice (it does: that is the outbox bug). ``--sweep`` does
what ``crash-harness sweep`` does for this worker, 13 cases: a run without a crash, one crash
after each of the six accepts (the worker kills itself after its POST returned), and one at
each of the six accepts as the provider sees them (the provider SIGKILLs the worker when the
k-th POST arrives, before it answers: the harness's ``crash@accepted.payments#k``), each on a
fresh database. Run by ``bench_command.py`` as a whole program, interpreter start included.
"""

import collections
import json
import os
import signal
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
from sqlalchemy import create_engine, text

received: collections.Counter[str] = collections.Counter()
#: the provider kills the worker when this POST (1-based) of a case arrives; 0: never
kill_at = {"nth": 0, "pid": 0}


class Provider(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        received[body["id"]] += 1
        if sum(received.values()) == kill_at["nth"]:
            os.kill(kill_at["pid"], signal.SIGKILL)
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def worker(db_url: str, url: str, crash_after: int | None) -> None:
    db = create_engine(db_url)
    with db.begin() as c:
        c.execute(text("CREATE TABLE IF NOT EXISTS sent (id VARCHAR(64) PRIMARY KEY)"))
    for n, job in enumerate(f"job-{i}" for i in range(6)):
        with db.begin() as c:
            if c.execute(text("SELECT 1 FROM sent WHERE id = :i"), {"i": job}).first():
                continue
        requests.post(url, json={"id": job}, timeout=5)
        if crash_after == n:
            os.kill(os.getpid(), signal.SIGKILL)
        with db.begin() as c:
            c.execute(text("INSERT INTO sent VALUES (:i)"), {"i": job})


def one_case(url: str, crash_after: int | None, far: int = 0) -> list[str]:
    """Run the worker (crashing after accept ``crash_after``, or killed by the provider at
    its ``far``-th POST), restart it, count at the provider."""
    received.clear()
    with tempfile.TemporaryDirectory() as tmp:
        db_url = f"sqlite:///{tmp}/ledger.db"
        for crash in (crash_after, None):  # the crashed run (if any), then the restart
            go_r, go_w = os.pipe()  # the worker starts once the provider knows its pid
            pid = os.fork()
            if pid == 0:
                os.read(go_r, 1)
                worker(db_url, url, crash)
                os._exit(0)
            kill_at.update(pid=pid, nth=far)
            os.write(go_w, b"!")
            os.close(go_r)
            os.close(go_w)
            os.waitpid(pid, 0)
            kill_at.update(pid=0, nth=0)
            if crash is None and far:
                far = 0
                continue
            if crash is None:
                break
    return sorted(job for job, n in received.items() if n > 1)


def main() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/send"
    near = [None, *range(6)] if "--sweep" in sys.argv else [0]
    far = list(range(1, 7)) if "--sweep" in sys.argv else []
    failed = 0
    for crash_after in near:
        twice = one_case(url, crash_after)
        failed += bool(twice)
        print(f"crash after accept {crash_after}: twice {twice}")
    for nth in far:
        twice = one_case(url, None, far=nth)
        failed += bool(twice)
        print(f"killed at the provider's accept {nth}: twice {twice}")
    server.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
