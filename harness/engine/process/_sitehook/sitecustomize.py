"""crash-harness's near-side hooks in an exec'd Python process of a worker.

The harness puts this directory first on ``PYTHONPATH`` of a worker whose sends and commits
it discovers (``harness.engine.process._hooks``), so every Python process of the worker's tree,
children and grandchildren included, runs this at start-up: it arms the process from
``CRASH_HARNESS_CONTROL`` (as ``import harness`` would) and installs the hooks, then runs the
``sitecustomize`` this one hides, if there is one, as Python would have.

A process whose interpreter cannot import the harness (another venv) gets the harness's
source root appended to ``sys.path`` (after everything of its own); if that fails too (another
Python version, a missing module), it says so on its stderr and runs unhooked: its sends and
commits are then no crash points, and a dry run that finds none says so (a coverage gap),
never a silent pass.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _install() -> None:
    if not os.environ.get("CRASH_HARNESS_CONTROL"):
        return
    try:
        from harness.engine.process import _hooks
    except ImportError:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(_HERE))))
        sys.path.append(root)
        try:
            from harness.engine.process import _hooks
        except Exception as exc:  # any reason is said, none is silent
            sys.stderr.write(
                f"crash-harness: no near-side hooks in pid {os.getpid()} ({sys.executable}):"
                f" cannot import the harness from {root}: {exc!r}\n"
            )
            return
    _hooks.install()


def _chain() -> None:
    """Run the ``sitecustomize`` this one hides (the user's, the distribution's)."""
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_install()
_chain()
