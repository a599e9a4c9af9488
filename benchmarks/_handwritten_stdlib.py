"""The ~20-line kill script a user writes with the standard library only: its own worker (post
each of six jobs to the provider, then mark it sent in SQLite), a threaded ``http.server`` fake
that SIGKILLs the worker when the first POST arrives (after the provider accepted, before the
worker marked it), a restart on the same database, and a count. Exits 1 on a duplicate (there
is one: the outbox bug). Run whole by ``bench_command.py``, interpreter start included.
"""

import http.server
import os
import signal
import sqlite3
import sys
import tempfile
import threading
import urllib.request

seen: list[bytes] = []


class Fake(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # the point: the provider has it, the worker has not marked it
        pid, job = self.rfile.read(int(self.headers["Content-Length"])).split()
        seen.append(job)
        if len(seen) == 1:
            os.kill(int(pid), signal.SIGKILL)
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def worker(db: str, url: str) -> None:
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("CREATE TABLE IF NOT EXISTS sent (id TEXT PRIMARY KEY)")
    for job in (f"job-{i}".encode() for i in range(6)):
        if not c.execute("SELECT 1 FROM sent WHERE id = ?", (job,)).fetchone():
            urllib.request.urlopen(url, data=b"%d %s" % (os.getpid(), job), timeout=5).read()
            c.execute("INSERT INTO sent VALUES (?)", (job,))


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
threading.Thread(target=server.serve_forever, daemon=True).start()
with tempfile.TemporaryDirectory() as tmp:
    for _ in range(2):  # the run killed at the point, then the restart
        pid = os.fork()
        if pid == 0:
            worker(f"{tmp}/outbox.db", f"http://127.0.0.1:{server.server_address[1]}/send")
            os._exit(0)
        os.waitpid(pid, 0)
twice = sorted({job for job in seen if seen.count(job) > 1})
print(f"{len(seen)} POSTs, twice: {twice}")
sys.exit(1 if twice else 0)
