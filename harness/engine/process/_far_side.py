"""Far-side crash points: the provider holds a reply, the harness kills the sender.

``crash@accepted.NAME#k`` needs nothing in the worker, whatever it is written in: the fake
provider ``NAME`` is told (``POST /_admin/hold``) to hold the reply to the k-th request whose
effect it accepts and commits from the moment the step's worker starts (for a case's first
step: of the case). When it holds one, it says so (``GET /_admin/held``, a server-side
wait); a thread of the harness that waits for that kills the worker's whole tree, recording
a crash line shaped like a boundary crash (``boundary: accepted.NAME``, ``hit: k``). The
worker dies with the effect accepted and its reply never received: the window between "the
provider has it" and "the ledger says so", found without annotating anything.

Only accepted effects count (``fresh``, ``expired_then_accepted``): a request the provider
refused, rejected, deduplicated or failed by a fault, a lookup and an admin call do not. So
a dry run's accepted effects of ``NAME`` are exactly the hits of ``accepted.NAME``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final

from fake_providers import AdminClient, ProviderProcess

#: the kind of a far-side point: ``accepted.NAME`` (NAME: the provider's name)
KIND: Final = "accepted"
PREFIX: Final = KIND + "."
#: how long one server-side wait for the hold lasts before the watcher asks again
WAIT_S: Final = 10.0
#: a provider not heard from for this long is not asked to disarm its hold (``stop``)
SILENT_S: Final = 1.0


def is_far_side(boundary: str | None) -> bool:
    """Whether ``boundary`` names a far-side point (``accepted.NAME``)."""
    return boundary is not None and boundary.startswith(PREFIX)


def provider_of(boundary: str) -> str:
    """The provider name in ``accepted.NAME``."""
    return boundary[len(PREFIX) :]


def point(provider: str) -> str:
    """The far-side point of ``provider``: ``accepted.NAME``."""
    return PREFIX + provider


class HoldWatch:
    """Arms a provider's hold for one epoch and, once ``start``ed, waits on its own thread
    for it to hold a reply; then calls ``on_held`` (which kills the worker) once. ``stop``
    disarms the hold (waking the wait) and returns what the provider said of it last.

    Armed at once, watched from ``start``: the caller starts the worker in between, while no
    other thread is alive, so the worker is born in its cgroup (``harness.engine.process._born``)
    instead of forked and moved; a reply held before the watch starts is seen at its first
    look, the hold being armed before the worker exists."""

    def __init__(
        self,
        provider: ProviderProcess,
        *,
        epoch: int,
        nth: int,
        on_held: Callable[[dict[str, Any]], None],
    ) -> None:
        self._provider = provider
        self._epoch = epoch
        self._on_held = on_held
        self._stopping = threading.Event()
        #: what ``/_admin/held`` said when the hold held a reply (None: it never did)
        self.held: dict[str, Any] | None = None
        self.error: str | None = None
        provider.admin.arm_hold(epoch, nth)
        self._thread = threading.Thread(target=self._watch, name="far-side-hold", daemon=True)

    def start(self) -> None:
        """Watch for the held reply from now on (the worker is started: see the class)."""
        self._thread.start()

    def _watch(self) -> None:
        # its own client: a requests session is not shared between threads
        with AdminClient(self._provider.url, self._provider.admin_token) as admin:
            while not self._stopping.is_set():
                try:
                    said = admin.wait_held(self._epoch, timeout_s=WAIT_S)
                except Exception as exc:  # the provider is gone: its watch says so
                    self.error = str(exc)
                    return
                if said.get("holding"):
                    self.held = said
                    self._on_held(said)
                    return
                if not said.get("armed"):
                    return

    def stop(self) -> dict[str, Any]:
        """Disarm the hold and wait for the watcher; what the hold was when disarmed.

        A provider silent for ``SILENT_S`` (its heartbeat: stopped, hung) answers neither:
        the hold is left as it is and the watcher is not waited for (the provider is killed
        and restarted as lost, which ends the watcher's call)."""
        self._stopping.set()
        heard = self._provider.heard()
        if heard is not None and time.monotonic() - heard >= SILENT_S:
            return {"armed": False, "error": "the provider stopped answering"}
        try:
            last = self._provider.admin.disarm_hold()
        except Exception as exc:
            last = {"armed": False, "error": str(exc)}
        if self._thread.ident is not None:  # started
            self._thread.join(WAIT_S + 10)
        return last
