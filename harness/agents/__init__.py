"""Ledgers read from what an agent framework already keeps, for agents run as ``cmd:``
systems (``[scenario] ledger = "module:attr"``).

An agent keeps no delivery record of its own: the only trace of a send is the tool's result
in the run's transcript, written after the send. The adapters here read that transcript as
the agent's ledger, so the invariants that need one are judged for an agent without a
hand-written ``LedgerAdapter``, and the columns a transcript cannot hold (which worker made a
row, the provider's receipt) are declared not given: those checkers say so instead of
passing on an empty value.

Each framework's adapter imports its framework only when it reads a case, and the engine
never imports this package.
"""

from __future__ import annotations

from harness.agents.dbos import DBOSSteps
from harness.agents.langgraph import LangGraphCheckpoints

__all__ = ["DBOSSteps", "LangGraphCheckpoints"]
