"""The case epoch a worker URL names, and the refusal a request of an ended epoch gets.

The harness hands each case's workers a base URL starting ``/epoch/<N>``, so a worker left
over from an earlier case is told apart from the current case's by its URL alone. This
module reads and strips that prefix and words the 410; what to do with a stale request
(refuse it, log it in its own epoch) is the caller's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final
from wsgiref.types import WSGIEnvironment

from werkzeug.wrappers import Request

_EPOCH_ARG: Final = "fake_providers.epoch"
_EPOCH_PATH: Final = re.compile(r"^/epoch/(?P<epoch>[0-9]{1,12})(?P<rest>/.*)?$")


def take_epoch_prefix(
    environ: WSGIEnvironment, current: Callable[[], int]
) -> dict[str, Any] | None:
    """Take a ``/epoch/<N>`` prefix off the path (noting N for ``request_epoch``); return
    the 410 payload if N is not the ``current()`` epoch, else None."""
    found = _EPOCH_PATH.match(str(environ.get("PATH_INFO", "")))
    if found is None:
        return None
    epoch = int(found.group("epoch"))
    environ["PATH_INFO"] = found.group("rest") or "/"
    environ[_EPOCH_ARG] = epoch
    now = current()
    if epoch == now:
        return None
    return stale_payload(epoch, now)


def request_epoch(request: Request) -> int | None:
    """The epoch named by the URL's ``/epoch/<N>`` prefix, if the request had one."""
    value = request.environ.get(_EPOCH_ARG)
    return value if isinstance(value, int) else None


def stale_payload(asked: int, current: int) -> dict[str, Any]:
    """The 410 body for a request of an epoch that is not the current one."""
    return {
        "error": f"epoch {asked} is not the current epoch ({current}); request refused",
        "epoch": asked,
        "current_epoch": current,
    }
