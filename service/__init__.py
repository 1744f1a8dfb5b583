"""The HTTP face of lwl (FastAPI). Not built yet: see the service issue and DESIGN.md."""
