"""The Celery face of lwl: workers that run job slices (docs/architecture.md, docs/service.md)."""
