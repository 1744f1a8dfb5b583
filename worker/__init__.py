"""The Celery face of lwl. Not built yet: see the service issue and DESIGN.md."""
