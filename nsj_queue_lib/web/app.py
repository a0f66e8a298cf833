"""The ASGI application: the API, the console, /health, /info, and what guards them all."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nsj_queue_lib.db.driver import Driver, make_driver
from nsj_queue_lib.exceptions import DatabaseError, NotFoundError
from nsj_queue_lib.web import api, console
from nsj_queue_lib.web.auth import Auth, Role, cross_site
from nsj_queue_lib.web.connections import Connections
from nsj_queue_lib.web.queues import Queues
from nsj_queue_lib.web.settings import WebSettings

STATIC = Path(__file__).parent / "static"
# The console loads only its own script and style sheet; Swagger UI (/docs) loads its
# bundle from a CDN and starts it with an inline script, so it gets a wider policy.
CONSOLE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
DOCS_POLICY = (
    "default-src 'none'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
    "style-src 'self' https://cdn.jsdelivr.net; img-src 'self' data: https://fastapi.tiangolo.com; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def version() -> str:
    try:
        return metadata.version("nsj-queue-lib")
    except metadata.PackageNotFoundError:  # pragma: no cover - a bare checkout
        return "unknown"


def create_app(settings: WebSettings, driver: Driver | None = None) -> FastAPI:
    """The application serving ``settings.queues`` (``driver``: the database's, by default
    ``make_driver(settings.database)``)."""
    driver = driver or make_driver(settings.database)
    app = FastAPI(
        title="nsj_queue_lib",
        version=version(),
        description="Enqueue, inspect, cancel and retry the tasks of a database queue.",
        docs_url="/docs",
        redoc_url=None,
    )
    connections = Connections(driver)
    app.state.settings = settings
    app.state.auth = Auth(settings)
    app.state.queues = Queues(settings.queues, connections)
    app.state.templates = console.templates()
    app.router.add_event_handler("shutdown", connections.close)

    _add_guards(app, settings.max_body_bytes)
    _add_error_handlers(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(api.router)
    app.include_router(console.router)
    _add_service_routes(app, driver.name)
    return app


def _add_service_routes(app: FastAPI, dialect: str) -> None:
    @app.get("/health", tags=["service"])
    def health() -> dict[str, str]:
        """The process answers (no database is asked)."""
        return {"status": "ok"}

    @app.get("/info", tags=["service"])
    def info(request: Request, role: Annotated[Role, Depends(api.caller)]) -> dict[str, Any]:
        """The library's version, the database's dialect, the queues, the caller's access."""
        queues: Queues = request.app.state.queues
        return {
            "version": version(),
            "dialect": dialect,
            "queues": queues.names,
            "default_queue": queues.default,
            "access": role.value,
        }


def _add_guards(app: FastAPI, max_body: int) -> None:
    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        if request.method not in ("GET", "HEAD", "OPTIONS") and cross_site(request):
            response: Response = JSONResponse({"detail": "cross-site request refused"}, 403)
        else:
            response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        docs = request.url.path == "/docs"
        response.headers["Content-Security-Policy"] = DOCS_POLICY if docs else CONSOLE_POLICY
        return response

    app.add_middleware(BodyLimit, max_body=max_body)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(NotFoundError)
    async def not_found(request: Request, exc: NotFoundError) -> Response:
        return JSONResponse({"detail": str(exc)}, 404)

    @app.exception_handler(DatabaseError)
    async def database_down(request: Request, exc: DatabaseError) -> Response:
        return JSONResponse({"detail": f"database: {exc}"}, 503)


class BodyLimit:
    """Refuses (413) a request whose body is longer than ``max_body`` bytes, whether it
    says so in Content-Length or sends more than it announced."""

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        response = JSONResponse({"detail": f"request body over {self.max_body} bytes"}, 413)
        await response({"type": "http"}, _nothing, send)


async def _nothing() -> Message:
    return {"type": "http.disconnect"}
