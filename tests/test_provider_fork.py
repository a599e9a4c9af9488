"""A provider forked from the harness (no new interpreter) is as far from the harness and its
workers as one started with ``python -m fake_providers serve``: its own session, none of the
harness's descriptors, SIGKILLed when the harness dies; and where a fork is not safe (another
thread alive), it is a new interpreter again."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

from fake_providers import ProviderProcess
from fake_providers._process import process_name

ROOT = Path(__file__).resolve().parent.parent


def _fds(pid: int) -> set[str]:
    """What each descriptor of ``pid`` points at (``pipe:[123]``, a path, ...)."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.add(os.readlink(fd))
        except OSError:
            continue
    return found


def test_a_forked_provider_names_itself_and_has_a_session_of_its_own(tmp_path: Path) -> None:
    with ProviderProcess.start(log_path=tmp_path / "effects.sqlite", preset="chat") as provider:
        comm = Path(f"/proc/{provider.pid}/comm").read_text().strip()
        assert comm == process_name("chat") == "fp:chat"
        assert os.getsid(provider.pid) == provider.pid  # a Ctrl-C to our group is not its
        assert provider.admin.health()["ok"] is True


def test_a_forked_provider_holds_none_of_the_parents_descriptors(tmp_path: Path) -> None:
    """A pipe end the harness holds (a worker's, a guard's) is not held open by the
    provider too: else its reader would never see the end of it."""
    r, w = os.pipe()
    try:
        with ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider:
            held = _fds(provider.pid)
            mine = {os.readlink(f"/proc/self/fd/{fd}") for fd in (r, w)}
            assert not mine & held, held
            assert str(tmp_path / "effects.sqlite") in held  # its own log it does hold
    finally:
        os.close(r)
        os.close(w)


def test_with_another_thread_alive_the_provider_is_a_new_interpreter(tmp_path: Path) -> None:
    """A fork copies only the forking thread; a lock another thread held would stay held
    in the child for ever. So with a second thread alive the provider is exec'd."""
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        with ProviderProcess.start(log_path=tmp_path / "effects.sqlite") as provider:
            argv = Path(f"/proc/{provider.pid}/cmdline").read_bytes().split(b"\0")
            assert b"fake_providers" in argv
            assert b"serve" in argv
            assert provider.admin.health()["ok"] is True
    finally:
        stop.set()
        other.join()


_PARENT = """
import sys
from pathlib import Path
from fake_providers import ProviderProcess
p = ProviderProcess.start(log_path=Path(sys.argv[1]))
print(p.pid, flush=True)
sys.stdin.read()
"""


def test_a_forked_provider_dies_with_a_sigkilled_parent(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path / "effects.sqlite")],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as parent:
        assert parent.stdout is not None
        try:
            pid = int(parent.stdout.readline())
            assert Path(f"/proc/{pid}/comm").read_text().strip().startswith("fp:")
            fd = os.pidfd_open(pid)
            try:
                parent.send_signal(signal.SIGKILL)
                parent.wait()
                gone, _, _ = select.select([fd], [], [], 60)  # a bound, not a measured duration
                assert gone, f"provider {pid} outlived its SIGKILLed parent"
            finally:
                os.close(fd)
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.wait()
