"""Entry point of `celery -A worker.main worker|beat`: the app, built from the environment."""

# First, before anything imports prometheus_client (see worker.multiproc).
from worker.multiproc import ensure_multiprocess_dir

ensure_multiprocess_dir()

from shared.infra.config import load_settings_or_exit  # noqa: E402
from shared.infra.logs import configure_logging  # noqa: E402
from worker.app import make_celery  # noqa: E402
from worker.logs import keep_celery_off_logging  # noqa: E402
from worker.metrics import connect_exporter_signals  # noqa: E402

settings = load_settings_or_exit()
configure_logging(settings.log_format)
keep_celery_off_logging(settings.log_format)
connect_exporter_signals()
app = make_celery(settings)
