"""Run a campaign's cases on several cores: each job is a forked process with its own
provider, supervisor, work dir and (as always) its own database per case.

Jobs take the next case not yet taken (a counter shared through a locked file), so a job that
started its provider later or drew slower cases never leaves a core idle; each streams its
results back over a pipe as soon as they are judged, and the results are put back in plan
order, so a report does not depend on which job ran what. A Ctrl-C reaches the jobs too
(same process group); each cleans up its own workers and provider. ``--shard i/n`` splits
a plan round-robin across CI machines.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path

from harness.engine.case import _jobpipe
from harness.engine.case._jobpipe import CaseRunner
from harness.engine.plan.schedule import CaseSpec
from harness.engine.results import CaseResult
from harness.errors import BadInputError, HarnessError


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
    campaign: CaseRunner,
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
    counter = campaign.workdir / f".next-case-{os.getpid()}-{id(cases)}"
    counter.write_bytes(b"0")
    results: list[CaseResult] = []
    inbox = _jobpipe.Inbox()

    def take(fd: int, kind: str, value: object) -> None:
        if kind == "bad_input":
            raise BadInputError(str(value))
        if kind == "error":
            raise HarnessError(f"job {children[fd][1] + 1} failed:\n{value}")
        assert isinstance(value, CaseResult)
        results.append(value)
        if on_case is not None:
            on_case(value)

    try:
        # Jobs 2..n are forked, each with a campaign of its own; job 1 is this process, on
        # the campaign (and provider) it already has, so no core waits for a provider start.
        for job in range(1, jobs):
            pid, read_fd = _jobpipe.start_job(
                campaign, f"job-{job + 1}", partial(_work, cases=cases, counter=counter)
            )
            children[read_fd] = (pid, job)
            inbox.add(read_fd)
        while (index := _claim(counter)) < len(cases):
            result = campaign.run(cases[index])
            results.append(result)
            if on_case is not None:
                on_case(result)
            inbox.receive(block=False, on_message=take)
        inbox.receive(block=True, on_message=take)
        for pid, job in children.values():
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise HarnessError(f"job {job + 1} (pid {pid}) exited with status {status}")
        children.clear()
        return sorted(results, key=lambda r: order[r.spec])
    finally:
        counter.unlink(missing_ok=True)
        for fd, (pid, _) in children.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                os.close(fd)


def _claim(counter: Path) -> int:
    """The index of the next case nobody has taken (shared by every job of a run)."""
    with open(counter, "r+b") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        taken = int(f.read() or b"0")
        f.seek(0)
        f.write(b"%d" % (taken + 1))
        f.truncate()
        return taken


def _work(campaign: CaseRunner, out_fd: int, *, cases: list[CaseSpec], counter: Path) -> None:
    """A forked job: run the next untaken case until none is left."""
    while (index := _claim(counter)) < len(cases):  # pragma: no cover - in the job
        _jobpipe.send(out_fd, "case", campaign.run(cases[index]))
