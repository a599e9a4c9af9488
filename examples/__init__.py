"""Worked examples of bringing your own worker to crash-harness (see each folder's README)."""
