"""The workers' Celery application (configuration in :mod:`service.core.queue`)."""

from service.core.queue import make_celery
from service.core.settings import get_settings

celery_app = make_celery(get_settings(), include=["worker.tasks"])
