"""The console's files over HTTP (docs/console.md): served from the package only, with their content
types and security headers, without a key; the API's routes keep their keys; cross-site posts refused."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable

import aiohttp
import msgspec
import pytest
import yaml
from aiohttp import web

from querator.auth import ApiKeys, generate_key, key_hash, parse_hash
from querator.console import CONTENT_SECURITY_POLICY, ConsoleFiles
from querator.http import create_admin_app, create_app, openapi_document
from querator.service import Service
from querator.storage.memory import MemoryStore
from tests.conftest import serving

KEY = generate_key("test")

AppFactory = Callable[[Service], web.Application]


async def _serve(make: AppFactory) -> AsyncIterator[str]:
    service = Service(MemoryStore())
    await service.start()
    server = await serving(make(service))
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await service.shutdown()
        await server.close()


@pytest.fixture
async def console() -> AsyncIterator[str]:
    """A node serving the console, with API keys on."""
    keys = ApiKeys([parse_hash(key_hash(KEY))])
    async for url in _serve(lambda s: create_app(s, api_keys=keys, console=True)):
        yield url


@pytest.fixture
async def keyless() -> AsyncIterator[str]:
    """A node serving the console without API keys."""
    async for url in _serve(lambda s: create_app(s, console=True)):
        yield url


AUTH = {"Authorization": f"Bearer {KEY}"}


async def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, allow_redirects=False) as r,
    ):
        return r.status, dict(r.headers), await r.read()


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/ui/", "text/html; charset=utf-8"),
        ("/ui/index.html", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/pages/queues.js", "text/javascript; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
        ("/ui/icon.svg", "image/svg+xml"),
    ],
)
async def test_files_are_served_without_a_key_with_their_type_and_headers(
    console: str, path: str, content_type: str
) -> None:
    status, headers, body = await _get(console + path)
    assert status == 200 and body
    assert headers["Content-Type"] == content_type
    assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert (
        "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
        and "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    )
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"


async def test_the_page_has_no_inline_script_or_style() -> None:
    index = ConsoleFiles.load().reply("")
    assert index is not None and isinstance(index.body, bytes)
    html = index.body.decode()
    assert "<script>" not in html and "<style" not in html and " style=" not in html
    assert re.search(r"\son[a-z]+=", html) is None  # no inline event handlers


async def test_the_documented_statuses_and_types(console: str) -> None:
    """What querator/openapi.yaml says of /ui and /ui/{file}."""
    doc = yaml.safe_load(openapi_document())
    files = doc["paths"]["/ui/{file}"]["get"]["responses"]
    for path in ("/ui/", "/ui/app.js", "/ui/style.css", "/ui/icon.svg", "/ui/no-such-file"):
        status, headers, _ = await _get(console + path)
        media = headers["Content-Type"].split(";")[0]
        assert media in files[str(status)]["content"], (path, status, media)
    assert set(doc["paths"]["/ui"]["get"]["responses"]) == {"302"}


async def test_ui_without_slash_redirects(console: str) -> None:
    status, headers, _ = await _get(console + "/ui")
    assert (status, headers["Location"]) == (302, "/ui/")


async def _raw_get(url: str, path: str) -> tuple[int, bytes]:
    """GET ``path`` exactly as written (aiohttp's client would resolve its dots first)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    reply = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize(
    "path",
    [
        "/ui/pages/../../server.py",
        "/ui/..%2fserver.py",
        "/ui/%2e%2e%2f__init__.py",
        "/ui/%2e%2e/%2e%2e/server.py",
        "/ui/..\\_files.py",
        "/ui/_files.py",
        "/ui/static/index.html",
        "/ui//etc/passwd",
        "/ui/nothing.js",
    ],
)
async def test_only_shipped_files_are_served(console: str, path: str) -> None:
    status, body = await _raw_get(console, path)
    assert status in (400, 401, 404), (path, status)
    assert b"from __future__" not in body and b"root:" not in body


async def test_a_post_to_the_console_is_an_unknown_method_as_elsewhere(console: str) -> None:
    async with aiohttp.ClientSession() as session, session.post(console + "/ui/", headers=AUTH) as r:
        assert r.status == 501
        assert (await r.json())["message"] == "no such method; /ui/"


@pytest.mark.parametrize("path", ["/uix", "/ui.js", "/uifoo/bar"])
async def test_only_the_console_is_open_without_a_key(console: str, path: str) -> None:
    status, _, _ = await _get(console + path)
    assert status == 401


async def test_the_api_still_needs_the_key(console: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(console + "/v1/queues.list", json={}) as r:
            assert r.status == 401
        async with session.post(console + "/v1/queues.list", json={}, headers=AUTH) as r:
            assert r.status == 200


@pytest.mark.parametrize("ui", [True, False], ids=["console", "no-ui"])
async def test_a_cross_site_post_is_refused(ui: bool) -> None:
    """What another site's page can make a browser send: a body with no Content-Type (read as JSON)
    or with a form's type, marked by the browser as another site's; refused whether the console is
    served or not (``--no-ui``), before the body is read (docs/adr/0020-web-console.md,
    docs/adr/0032-keyless-nodes-check-the-site-and-the-host.md)."""
    forged = b'{"queue_name": "forged"}'
    refused = "request is invalid; a browser sent it for another site (Sec-Fetch-Site)"
    async for keyless in _serve(lambda s: create_app(s, console=ui)):
        async with aiohttp.ClientSession() as session:
            for site in ("cross-site", "same-site"):
                for form_type in (
                    None,
                    "text/plain",
                    "application/x-www-form-urlencoded",
                    "application/json",
                ):
                    headers = {"Sec-Fetch-Site": site} | ({"Content-Type": form_type} if form_type else {})
                    async with session.post(
                        keyless + "/v1/queues.create",
                        data=forged,
                        headers=headers,
                        skip_auto_headers=["Content-Type"],
                    ) as r:
                        assert r.status == 400
                        assert (await r.json())["message"] == refused
            async with session.post(keyless + "/v1/queues.info", json={"queue_name": "forged"}) as r:
                assert r.status == 400  # never created
            # The console's own calls (same-origin), and clients that send no such header, go through.
            for headers in ({"Sec-Fetch-Site": "same-origin"}, {}):
                async with session.post(
                    keyless + "/v1/queues.list",
                    data=b"{}",
                    headers=headers,
                    skip_auto_headers=["Content-Type"],
                ) as r:
                    assert r.status == 200
            if ui:  # A link from another site to the console is a navigation (a GET): it opens.
                status, _, _ = await _get(keyless + "/ui/", {"Sec-Fetch-Site": "cross-site"})
                assert status == 200


async def test_without_the_console_ui_is_an_unknown_path() -> None:
    async for url in _serve(create_app):
        status, headers, _ = await _get(url + "/ui/")
        assert status == 400 and "Content-Security-Policy" not in headers


async def test_the_admin_address_serves_the_console_and_its_api_with_keys() -> None:
    keys = ApiKeys([parse_hash(key_hash(KEY))])
    async for url in _serve(lambda s: create_admin_app(s, True, keys)):
        status, _, _ = await _get(url + "/ui/")
        assert status == 200
        for open_path in ("/health", "/metrics"):
            assert (await _get(url + open_path))[0] == 200
        async with aiohttp.ClientSession() as session:
            async with session.post(url + "/v1/queues.list", json={}) as r:
                assert r.status == 401
            async with session.post(url + "/v1/queues.list", json={}, headers=AUTH) as r:
                assert r.status == 200
    # Its probes stay as without the console: /ready tells anyone why it is not ready.
    not_started = create_admin_app(Service(MemoryStore()), True, keys)
    server = await serving(not_started)
    try:
        status, _, body = await _get(str(server.make_url("/ready")))
        assert (status, msgspec.json.decode(body)) == (503, {"status": "fail", "output": "starting"})
    finally:
        await server.close()
    async for url in _serve(create_admin_app):
        assert (await _get(url + "/ui/"))[0] == 400
        async with aiohttp.ClientSession() as session, session.post(url + "/v1/queues.list", json={}) as r:
            assert r.status == 501
