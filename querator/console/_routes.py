"""The console's routes on an aiohttp application: ``/ui`` redirects to ``/ui/``, which serves the files."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from querator.console._files import CONSOLE_PREFIX, SECURITY_HEADERS, ConsoleFiles

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_console(app: web.Application, other_methods: Handler) -> None:
    """Adds the console's routes to ``app`` (before its catch-all route); ``other_methods`` answers any
    method but GET and HEAD, as the application answers them elsewhere."""
    files = ConsoleFiles.load()

    async def redirect(request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return await other_methods(request)
        raise web.HTTPFound(CONSOLE_PREFIX)

    async def serve(request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return await other_methods(request)
        response = files.reply(request.match_info["file"])
        if response is None:
            headers = {**SECURITY_HEADERS, "Content-Type": "text/plain; charset=utf-8"}
            return web.Response(status=404, text="no such file in the console\n", headers=headers)
        return response

    app.router.add_route("*", CONSOLE_PREFIX.rstrip("/"), redirect)
    app.router.add_route("*", CONSOLE_PREFIX + "{file:.*}", serve)
