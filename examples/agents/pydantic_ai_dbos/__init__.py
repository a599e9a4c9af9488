"""A Pydantic AI agent made durable with DBOS: its tool posts a webhook (see README.md)."""
