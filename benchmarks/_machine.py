"""What about this machine changes a benchmark's figures, printed beside them."""

from __future__ import annotations

import os


def tree_setup() -> str:
    """How worker trees are found here: a cgroup's start-up cost depends on the mount."""
    from harness.engine.process import _tree
    from harness.engine.process.supervisor import TREE_MODE_ENV

    if os.environ.get(TREE_MODE_ENV) == "walk" or _tree.cgroup2_base() is None:
        return "walk over /proc (no cgroup may be created here)"
    dyn = "on" if _tree.favours_dynamic_moves() else "off"
    return f"cgroup v2 per worker (favordynmods {dyn})"


def births(sup: object) -> str:
    """How the supervisor's workers reached their cgroups (born there by clone3, or moved)."""
    counts = getattr(sup, "births", {})
    return ", ".join(f"{n} {how}" for how, n in sorted(counts.items())) or "no cgroup births"
