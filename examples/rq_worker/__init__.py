"""A delivery worker built on RQ (Redis Queue), certified through the command route."""
