"""The dashboard's static page: ``index.html``, ``app.js``, ``plots.js``, ``style.css``.

The service serves them at ``/ui`` (:mod:`service.routers.ui`); :func:`offline_page` inlines
them with one result document into a single HTML file (``lwl report``). Plain JavaScript and
SVG, no build step and nothing fetched from the internet.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ASSETS = Path(__file__).resolve().parent
FILES = {"app.js": "text/javascript", "plots.js": "text/javascript", "style.css": "text/css"}


def asset(name: str) -> str:
    return (ASSETS / name).read_text()


def _script_json(doc) -> str:
    """JSON that is safe inside <script>: no "</" can close the element early."""
    return json.dumps(doc, allow_nan=False).replace("</", "<\\/").replace("<!--", "<\\!--")


def offline_page(result: dict, title: str) -> str:
    """One self-contained HTML file that shows a finished job's page from its result document."""
    html = asset("index.html")
    html = re.sub(r"<!--ONLINE-->.*?<!--/ONLINE-->", "", html, flags=re.S)
    html = re.sub(r"<!--STYLE-->.*?<!--/STYLE-->", lambda _: f"<style>\n{asset('style.css')}</style>", html, flags=re.S)
    scripts = (f"<script>window.LWL_OFFLINE = {{\"title\": {_script_json(title)}, \"result\": {_script_json(result)}}};"
               f"</script>\n<script>\n{asset('plots.js')}</script>\n<script>\n{asset('app.js')}</script>")
    html = re.sub(r"<!--SCRIPTS-->.*?<!--/SCRIPTS-->", lambda _: scripts, html, flags=re.S)
    return html.replace("<title>lwl dashboard</title>", f"<title>lwl report: {_escape(title)}</title>")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
