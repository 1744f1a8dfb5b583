"""Write the app's OpenAPI document: ``python -m service.openapi > openapi.json``.

``tests/service/test_openapi.py`` fails when the committed file differs from the app's.
"""

import json
import sys
import tempfile
from pathlib import Path


def generate() -> dict:
    from service.app import create_app
    from service.core.settings import Settings
    from service.core.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), api_keys="")
        app = create_app(settings, store=Store(f"sqlite:///{tmp}/x.db"), enqueue=lambda *_: None)
        return app.openapi()


def render() -> str:
    return json.dumps(generate(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
