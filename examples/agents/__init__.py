"""Agents as they ship (LangGraph, ...), crashed through their own recovery; no LLM."""
