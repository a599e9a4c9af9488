"""``python -m harness`` is the same as the ``crash-harness`` command."""

from harness.cli import main

main()
