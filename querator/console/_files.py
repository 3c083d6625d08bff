"""The console's files, loaded from ``querator/console/static/`` and answered with fixed headers."""

from __future__ import annotations

import functools
import importlib.resources
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from aiohttp import web

CONSOLE_PREFIX = "/ui/"
INDEX = "index.html"
MAX_FILES_BYTES = 2_000_000
"""The files together: a bound on what the node keeps in memory for the console (they are ~100 KB)."""

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}
"""The only kinds of file the console ships; any other file in the directory is a packaging mistake."""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""No inline script or style, nothing from elsewhere, calls to this origin only, never framed."""

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    # Files change with the version: revalidate rather than run a stale script against a newer API.
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True, slots=True)
class _File:
    body: bytes
    content_type: str


class ConsoleFiles:
    """Every file of the console by its path below ``/ui/``; ``reply`` answers one of them or None."""

    def __init__(self, files: dict[str, _File]) -> None:
        self._files = files

    @classmethod
    @functools.cache
    def load(cls) -> ConsoleFiles:
        """The files shipped in the package (read once per process, before the event loop needs them)."""
        files: dict[str, _File] = {}
        _walk(importlib.resources.files("querator.console").joinpath("static"), "", files)
        total_bytes = sum(len(f.body) for f in files.values())
        if INDEX not in files or total_bytes > MAX_FILES_BYTES:
            raise RuntimeError(f"the console's files are broken: {len(files)} files, {total_bytes} bytes")
        return cls(files)

    def names(self) -> list[str]:
        return sorted(self._files)

    def reply(self, name: str) -> web.Response | None:
        """The response for ``/ui/<name>`` (``index.html`` for the empty name), None if none was shipped.

        ``name`` is looked up, never joined to a path, so ``..`` or an encoded slash finds nothing.
        """
        found = self._files.get(name or INDEX)
        if found is None:
            return None
        # (aiohttp sends the headers alone to a HEAD.)
        return web.Response(body=found.body, headers={"Content-Type": found.content_type, **SECURITY_HEADERS})


def _walk(directory: Traversable, prefix: str, files: dict[str, _File]) -> None:
    for entry in directory.iterdir():
        name = prefix + entry.name
        if entry.is_dir():
            _walk(entry, name + "/", files)
            continue
        suffix = "." + entry.name.rpartition(".")[2]
        content_type = CONTENT_TYPES.get(suffix)
        if content_type is None:
            raise RuntimeError(f"the console ships a file of an unknown kind: {name}")
        files[name] = _File(entry.read_bytes(), content_type)
