"""Agents and durable workflows as they ship (LangGraph, DBOS, Pydantic AI), crashed through
their own recovery where they send; no LLM (see each folder)."""
