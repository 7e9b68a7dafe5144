"""The Celery worker fleet and the `driftless` command line."""
