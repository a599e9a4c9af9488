"""An asyncio notification worker with its own ledger, in a buggy and a fixed variant.

``examples.asyncio_worker.buggy:SYSTEM`` fires and forgets its delivery tasks;
``examples.asyncio_worker.fixed:SYSTEM`` keeps a reference to each. See README.md.
"""
