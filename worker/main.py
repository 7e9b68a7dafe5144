"""Entry point of `celery -A worker.main worker|beat`: the app, built from the environment."""

from shared.config import load_settings_or_exit
from worker.app import make_celery
from worker.logs import configure_logging

configure_logging()
app = make_celery(load_settings_or_exit())
