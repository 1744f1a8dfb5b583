"""Write the app's OpenAPI document: ``python -m service.openapi > openapi.json``.

``tests/service/test_openapi.py`` fails when the committed file differs from the app's.
"""

import json
import sys
import tempfile
from pathlib import Path


def _canonical(node):
    """The document with its unions' branches (lists of ``$ref``) and enums in sorted order: the
    order of registered components follows the order their modules were imported in (a process
    that imports lwl.runner first registers the algorithms in another order than one that reads a
    registry first), and the committed document must not depend on it."""
    if isinstance(node, dict):
        return {k: (sorted(v) if k == "enum" and all(isinstance(x, str) for x in v) else _canonical(v))
                for k, v in node.items()}
    if isinstance(node, list):
        items = [_canonical(x) for x in node]
        if items and all(isinstance(x, dict) and set(x) == {"$ref"} for x in items):
            return sorted(items, key=lambda x: x["$ref"])
        return items
    return node


def generate() -> dict:
    from service.app import create_app
    from service.core.settings import Settings
    from service.core.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), api_keys="")
        app = create_app(settings, store=Store(f"sqlite:///{tmp}/x.db"), enqueue=lambda *_: None)
        return _canonical(app.openapi())


def render() -> str:
    return json.dumps(generate(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
