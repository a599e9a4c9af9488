"""Agent and durable-workflow frameworks as they ship, crashed where they send (see each folder)."""
