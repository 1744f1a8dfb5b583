"""The workers' Celery application (configuration in :mod:`service.core.queue`)."""

from lwl.registry import load_plugins
from service.core.queue import make_celery
from service.core.settings import get_settings

load_plugins()  # the same registered components as the API (LWL_PLUGINS)

celery_app = make_celery(get_settings(), include=["worker.tasks"])
