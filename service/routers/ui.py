"""The dashboard: ``GET /ui`` serves one static page (lwl/ui) that talks to the /v1 API like
any client; the API key is entered in the page and kept for the browser session, so the UI
needs no session of its own and has the API's owners and keys. Assets ship in the package
(no CDN: the page works with no internet access)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

from lwl.ui import ASSETS, FILES, asset
from service.problems import Problem

router = APIRouter(include_in_schema=False)


@router.get("/ui")
def dashboard(request: Request) -> HTMLResponse:
    """The page; it is told whether the API wants a bearer key, so that it asks for one first."""
    html = asset("index.html")
    if request.app.state.keys:
        html = html.replace('<meta name="lwl-auth" content="none">', '<meta name="lwl-auth" content="bearer">')
    return HTMLResponse(html, headers={"Cache-Control": "no-cache"})


@router.get("/ui/")
def dashboard_slash() -> RedirectResponse:
    return RedirectResponse("/ui")


@router.get("/ui/static/{name}")
def static_asset(name: str) -> FileResponse:
    if name not in FILES:  # a fixed list: no path from the request reaches the file system
        raise Problem(404, "Not found", f"no asset {name!r}")
    return FileResponse(ASSETS / name, media_type=FILES[name], headers={"Cache-Control": "no-cache"})
