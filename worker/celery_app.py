"""The workers' Celery application (configuration in :mod:`service.queue`)."""

from service.queue import make_celery
from service.settings import get_settings

celery_app = make_celery(get_settings(), include=["worker.tasks"])
