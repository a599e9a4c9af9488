"""Results from forked jobs to their parent: length-prefixed pickles over a pipe.

Parallel cases (``harness.engine.case.parallel``) and side-by-side explore searches
(``harness.engine.search.explore``) both stream each result as soon as it is judged. The parent
runs work of its own and reads whatever has arrived between its cases, so the pipe is made
large enough that a job rarely waits on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import struct
import traceback
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Protocol, Self

from harness.engine.plan.schedule import CaseSpec
from harness.engine.process import _leftovers
from harness.engine.process.supervisor import wait_readable
from harness.engine.results import CampaignSettings, CaseResult
from harness.errors import BadInputError


class CaseRunner(Protocol):
    """What a job needs of the campaign it is forked from (``Campaign`` is one): its settings
    as given, its work dir, a way to make one of its own kind, and running a case. A
    protocol, so that the jobs never import the campaign that starts them."""

    given_settings: CampaignSettings
    workdir: Path

    def __init__(self, settings: CampaignSettings) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def run(self, case: CaseSpec, *, slug_prefix: str = "") -> CaseResult: ...


_HEADER = struct.Struct("!I")
#: fcntl: set a pipe's capacity (Linux)
_F_SETPIPE_SZ = 1031


def open_pipe() -> tuple[int, int]:
    """(read end, write end), with room for many results between the parent's reads."""
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(write_fd, _F_SETPIPE_SZ, 1 << 20)
    return read_fd, write_fd


def send(fd: int, kind: str, value: object) -> None:
    """One message from a job: ``kind`` says what ``value`` is (a case, an error, ...)."""
    payload = pickle.dumps((kind, value))
    data = _HEADER.pack(len(payload)) + payload
    while data:
        written = os.write(fd, data)
        data = data[written:]


def start_job(
    parent: CaseRunner,
    name: str,
    work: Callable[[CaseRunner, int], None],
    *,
    close_in_child: Iterable[int] = (),
) -> tuple[int, int]:
    """Fork a job that runs ``work(campaign, out_fd)`` on a campaign of its own (its own
    provider and work dir ``parent.workdir / name``); returns (pid, read end).

    The job dies with its parent, sends ``("error", traceback)`` if ``work`` raises, and
    exits without running the parent's cleanup."""
    read_fd, write_fd = open_pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the job process
        code = 0
        try:
            os.close(read_fd)
            for fd in close_in_child:
                os.close(fd)
            from harness.engine.process._child import die_with_parent

            die_with_parent(os.getppid())
            settings = replace(
                parent.given_settings, workdir=parent.workdir / name, keep_workdir=True
            )
            assert settings.workdir is not None
            settings.workdir.mkdir(parents=True, exist_ok=True)
            # a campaign of the parent's own kind: this module never imports the campaign
            with type(parent)(settings) as campaign:
                work(campaign, write_fd)
        except BadInputError as exc:  # the user's input or glue: the parent says it in a line
            code = 1
            with contextlib.suppress(Exception):
                send(write_fd, "bad_input", str(exc))
        except BaseException:
            code = 1
            with contextlib.suppress(Exception):
                send(write_fd, "error", traceback.format_exc())
        finally:
            os._exit(code)
    os.close(write_fd)
    _leftovers.HARNESS_PIDS.add(pid)  # the harness's own: never a worker's leftover
    return pid, read_fd


class Inbox:
    """The parent's side: the read ends of every job still sending."""

    def __init__(self) -> None:
        self._buffers: dict[int, bytes] = {}

    def add(self, fd: int) -> None:
        self._buffers[fd] = b""

    def receive(
        self,
        *,
        block: bool,
        on_message: Callable[[int, str, object], None],
        on_closed: Callable[[int], None] | None = None,
    ) -> None:
        """Hand every complete message to ``on_message(fd, kind, value)``; with ``block``,
        until every job has closed its end (``on_closed(fd)`` for each)."""
        while self._buffers:
            ready = wait_readable(list(self._buffers), None if block else 0)
            if not ready:
                return
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    del self._buffers[fd]
                    if on_closed is not None:
                        on_closed(fd)
                    continue
                buffer = self._buffers[fd] + chunk
                while len(buffer) >= _HEADER.size:
                    (size,) = _HEADER.unpack_from(buffer)
                    if len(buffer) < _HEADER.size + size:
                        break
                    kind, value = pickle.loads(buffer[_HEADER.size : _HEADER.size + size])
                    buffer = buffer[_HEADER.size + size :]
                    self._buffers[fd] = buffer
                    on_message(fd, kind, value)
                self._buffers[fd] = buffer
