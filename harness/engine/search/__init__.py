"""Many cases, chosen by what earlier ones showed: every discovered boundary (``sweep``),
Hypothesis-drawn schedules (``explore``), a sample of recoveries (``recovery``), reruns of
one seed compared (``determinism``), and whether each planned step landed (``_landings``).

The top room: it may import every other, and nothing of the engine imports it.
"""
