"""Run a campaign's cases on several cores: each job is a forked process with its own
provider, supervisor, work dir and (as always) its own database per case.

Jobs take cases round-robin, stream each result back over a pipe as soon as it is judged,
and the results are put back in plan order, so a report does not depend on which job was
faster. A Ctrl-C reaches the jobs too (same process group); each cleans up its own workers
and provider. ``--shard i/n`` uses the same round-robin split across CI machines.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from harness.campaign import Campaign, CampaignSettings, CaseResult
from harness.errors import BadInputError, HarnessError
from harness.schedule import CaseSpec
from harness.supervisor import wait_readable

_HEADER = struct.Struct("!I")


def shard(cases: list[CaseSpec], spec: str) -> list[CaseSpec]:
    """The ``i/n`` shard of a case list (1-based), deterministic for a given plan."""
    try:
        index_text, count_text = spec.split("/")
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise BadInputError(f"--shard: {spec!r} is not i/n (e.g. 1/4)") from None
    if not 1 <= index <= count:
        raise BadInputError(f"--shard: {spec!r}: i must be between 1 and n")
    return cases[index - 1 :: count]


def run_cases(
    campaign: Campaign,
    cases: list[CaseSpec],
    *,
    jobs: int,
    on_case: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    """Run ``cases`` (in this process when ``jobs`` is 1) and return results in plan order."""
    if jobs <= 1 or len(cases) <= 1:
        serial: list[CaseResult] = []
        for case in cases:
            result = campaign.run(case)
            serial.append(result)
            if on_case is not None:
                on_case(result)
        return serial
    jobs = min(jobs, len(cases))
    order = {case: i for i, case in enumerate(cases)}
    children: dict[int, tuple[int, int]] = {}  # read fd -> (pid, job)
    try:
        for job in range(jobs):
            chunk = cases[job::jobs]
            job_settings = replace(
                campaign.given_settings,
                workdir=campaign.workdir / f"job-{job + 1}",
                keep_workdir=True,
            )
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the job process
                os.close(read_fd)
                _job(job_settings, chunk, write_fd)
            os.close(write_fd)
            children[read_fd] = (pid, job)
        results: list[CaseResult] = []
        buffers = {fd: b"" for fd in children}
        open_fds = set(children)
        while open_fds:
            ready = wait_readable(list(open_fds), None)
            for fd in ready:
                chunk_bytes = os.read(fd, 1 << 16)
                if not chunk_bytes:
                    open_fds.discard(fd)
                    continue
                buffers[fd] += chunk_bytes
                while len(buffers[fd]) >= _HEADER.size:
                    (size,) = _HEADER.unpack_from(buffers[fd])
                    if len(buffers[fd]) < _HEADER.size + size:
                        break
                    payload = buffers[fd][_HEADER.size : _HEADER.size + size]
                    buffers[fd] = buffers[fd][_HEADER.size + size :]
                    kind, value = pickle.loads(payload)
                    if kind == "error":
                        raise HarnessError(f"job {children[fd][1] + 1} failed:\n{value}")
                    results.append(value)
                    if on_case is not None:
                        on_case(value)
        for pid, job in children.values():
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise HarnessError(f"job {job + 1} (pid {pid}) exited with status {status}")
        children.clear()
        return sorted(results, key=lambda r: order[r.spec])
    finally:
        for fd, (pid, _) in children.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                os.close(fd)


def _job(
    settings: CampaignSettings, cases: list[CaseSpec], out_fd: int
) -> None:  # pragma: no cover
    code = 0
    try:
        from harness.supervisor import _die_with_parent

        _die_with_parent(os.getppid())
        assert settings.workdir is not None
        Path(settings.workdir).mkdir(parents=True, exist_ok=True)
        with Campaign(settings) as campaign:
            for case in cases:
                _send(out_fd, ("case", campaign.run(case)))
    except BaseException:
        code = 1
        with contextlib.suppress(Exception):
            _send(out_fd, ("error", traceback.format_exc()))
    finally:
        os._exit(code)


def _send(fd: int, message: tuple[str, object]) -> None:
    payload = pickle.dumps(message)
    data = _HEADER.pack(len(payload)) + payload
    while data:
        written = os.write(fd, data)
        data = data[written:]
