"""A DBOS workflow as it ships: its step posts a webhook (see README.md)."""
