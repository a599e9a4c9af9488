"""A LangGraph functional-API agent as it would ship: ``@entrypoint`` and ``@task``."""
