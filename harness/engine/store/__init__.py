"""Where a case's things are kept, and kept apart from every other case and run.

Case databases, work dirs, the trace and the timeline read back from it, secrets that are
never printed, and a write the machine refused (the case unknown, never the worker's fault).
The lowest room: it imports no other room of the engine.
"""
