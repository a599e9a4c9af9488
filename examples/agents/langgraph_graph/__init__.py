"""A LangGraph graph-API agent as it would ship: ``StateGraph`` + ``ToolNode``."""
