"""The outbox worker as it would ship: no test tool imported, its settings from its own env."""
