"""A worker that prints without end costs the harness nothing: it reads the end of the
stderr file only (the report's tail says how much came before), and takes secrets out of the
whole file a chunk at a time, in place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engine.store import _secrets

ROOT = Path(__file__).resolve().parent.parent
SECRET = "tok-0123456789abcdef"
MEGABYTES = 96

#: run in a fresh interpreter, so its memory high-water mark is the harness's alone
_HARNESS = """
import json, os, resource, sys
from pathlib import Path
from harness.engine.store import _secrets
from harness.engine.process.supervisor import Supervisor

SECRET, MB, workdir = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
_secrets.hand_out(SECRET)

def prints_without_end():
    block = b"x" * ((1 << 20) - 7)
    for _ in range(MB):  # a secret across every 1 MiB chunk boundary of the file
        os.write(2, block + SECRET.encode())
    raise RuntimeError("the worker's last words")

trace = workdir / "trace.jsonl"
with Supervisor(workdir=workdir) as sup:
    worker = sup.start("w1", prints_without_end, trace_path=trace)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = sup.wait(worker, timeout_s=600, trace_path=trace)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kb": after - before, "kind": out.kind.value, "tail": out.stderr_tail}))
"""


def test_a_worker_that_prints_a_hundred_megabytes_does_not_grow_the_harness(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _HARNESS, SECRET, str(MEGABYTES), str(tmp_path)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    # reading the whole file would take at least its size; a chunk at a time takes ~1 MB
    assert seen["grew_kb"] < MEGABYTES * 1024 // 4, seen["grew_kb"]
    assert seen["kind"] == "died"
    tail = seen["tail"]
    assert "RuntimeError: the worker's last words" in tail
    assert len(tail.encode()) < 64 * 1024  # what a report carries is bounded too
    head = tail.splitlines()[0]
    assert head.startswith("["), head
    assert "bytes cut before this" in head, head
    assert "w1.stderr" in head
    assert SECRET not in tail
    # the whole file stays, every secret in it masked (the ones cut by a chunk's end too)
    whole = (tmp_path / "w1.stderr").read_bytes()
    assert SECRET.encode() not in whole
    assert whole.count(_secrets.MASK.encode()) == MEGABYTES
    cut = int(head.removeprefix("[").split()[0])
    assert cut + len(tail.split("\n", 1)[1].encode()) == len(whole)


@pytest.mark.parametrize("chunk", [1, 5, 19, 20, 21, 64, 1 << 20])
def test_scrubbing_a_file_in_chunks_masks_what_scrubbing_it_whole_would(
    tmp_path: Path, chunk: int
) -> None:
    _secrets.hand_out(SECRET, "another-secret-xyz")
    text = f"a{SECRET}b{SECRET}{SECRET}\nanother-secret-xyz{SECRET[:9]}é end{SECRET}"
    path = tmp_path / "w.stderr"
    path.write_bytes(text.encode())
    assert _secrets.scrub_file(path, chunk=chunk)
    assert path.read_bytes() == _secrets.scrub(text).encode()
    assert not _secrets.scrub_file(path, chunk=chunk)  # nothing left to mask
