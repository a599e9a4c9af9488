"""A delivery worker built on Celery with the Redis broker, certified through the command route."""
