"""The HTTP face of lwl (FastAPI): docs/architecture.md, docs/service.md."""
