"""The bytes of a reply on the wire (``querator.http.Reply``): the status line and headers, keep-alive
and close for HTTP/1.1 and HTTP/1.0, HEAD and large bodies, read from a raw socket as a client's HTTP
stack would. (A forwarded request's signed reply: tests/integration/test_cluster_security.py.)"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
from collections.abc import AsyncIterator
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

import msgspec

from querator.http import Reply
from tests.conftest import Api

PRODUCE = msgspec.json.encode({"queue_name": "q", "request_timeout": "1m", "items": [{"utf8": "hi"}]})
JSON = {"Content_Type": "application/json"}


class Connection:
    """One raw HTTP connection to the test server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, method: str, path: str, body: bytes, version: str = "1.1", **headers: str) -> None:
        lines = [f"{method} {path} HTTP/{version}", "Host: test", f"Content-Length: {len(body)}"]
        lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await self.writer.drain()

    async def reply(self, head_only: bool = False) -> tuple[str, dict[str, str], bytes]:
        """The status line, the headers (by lower-case name) and the body of the next reply."""
        raw = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)
        status, *fields = raw.decode().split("\r\n")[:-2]
        headers: dict[str, str] = {}
        for field in fields:
            name, value = field.split(":", 1)
            assert name.lower() not in headers, f"{name} twice"
            headers[name.lower()] = value.strip()
        size = 0 if head_only else int(headers["content-length"])
        return status, headers, await asyncio.wait_for(self.reader.readexactly(size), 10)

    async def closed(self) -> bool:
        """Whether the server closed the connection (nothing more came)."""
        return await asyncio.wait_for(self.reader.read(1), 10) == b""


@contextlib.asynccontextmanager
async def connect(api: Api) -> AsyncIterator[Connection]:
    url = urlsplit(api.base)
    assert url.hostname is not None and url.port is not None
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        yield Connection(reader, writer)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_a_reply_has_the_headers_a_client_needs_and_keeps_the_connection(api: Api) -> None:
    await api.create("q")
    async with connect(api) as conn:
        await conn.send("POST", "/v1/queue.produce", PRODUCE, **JSON)
        status, headers, body = await conn.reply()
        assert status == "HTTP/1.1 200 OK"
        assert set(headers) == {"content-type", "x-content-type-options", "content-length", "date"}
        assert headers["content-type"] == "application/json"
        assert headers["x-content-type-options"] == "nosniff"
        assert msgspec.json.decode(body) == {"code": 200}
        assert parsedate_to_datetime(headers["date"]).tzname() == "UTC"
        # Kept alive: a second request on the connection is answered, with a 4xx's reason phrase.
        await conn.send("POST", "/v1/queue.produce", PRODUCE.replace(b'"q"', b'"nope"'), **JSON)
        status, headers, body = await conn.reply()
        assert status == "HTTP/1.1 400 Bad Request"
        assert msgspec.json.decode(body)["code"] == 400


async def test_our_own_codes_carry_their_reason_phrase(api: Api) -> None:
    async with connect(api) as conn:
        await conn.send("POST", "/v1/queue.produce", PRODUCE, Content_Type="text/plain")
        status, _, _ = await conn.reply()
        assert status == "HTTP/1.1 455 Client Content Error"


def test_a_code_of_our_own_or_a_standard_one_has_its_reason_phrase() -> None:
    assert Reply(b"", "application/json", 454).reason == "Retry Request"
    assert Reply(b"", "application/json", 503).reason == "Service Unavailable"


async def test_an_http_1_1_client_asking_to_close_is_told_and_the_connection_closes(api: Api) -> None:
    await api.create("q")
    async with connect(api) as conn:
        await conn.send(
            "POST", "/v1/queue.produce", PRODUCE, Content_Type="application/json", Connection="close"
        )
        status, headers, _ = await conn.reply()
        assert (status, headers["connection"]) == ("HTTP/1.1 200 OK", "close")
        assert await conn.closed()


async def test_an_http_1_0_client_is_answered_in_http_1_0_and_closed_unless_kept_alive(api: Api) -> None:
    await api.create("q")
    async with connect(api) as conn:
        await conn.send("POST", "/v1/queue.produce", PRODUCE, "1.0", **JSON)
        status, headers, _ = await conn.reply()
        assert status == "HTTP/1.0 200 OK" and "connection" not in headers
        assert await conn.closed()
    async with connect(api) as conn:
        for _ in range(2):
            await conn.send("POST", "/v1/queue.produce", PRODUCE, "1.0", Connection="keep-alive", **JSON)
            status, headers, _ = await conn.reply()
            assert (status, headers["connection"]) == ("HTTP/1.0 200 OK", "keep-alive")


async def test_a_head_request_gets_the_headers_without_the_body(api: Api) -> None:
    async with connect(api) as conn:
        await conn.send("HEAD", "/v1/queue.produce", b"")
        status, headers, _ = await conn.reply(head_only=True)
        assert status == "HTTP/1.1 400 Bad Request"
        assert int(headers["content-length"]) > 0  # the size a POST's reply would have
        # No body followed: the next reply starts right after the headers.
        await conn.send("GET", "/v1/queue.produce", b"")
        status, _, body = await conn.reply()
        assert status == "HTTP/1.1 400 Bad Request"
        assert re.search(rb"http method 'GET' not allowed", body)


async def test_a_large_reply_arrives_whole(api: Api) -> None:
    """A large body goes to the transport beside its headers, not copied after them (``LARGE_BODY``)."""
    await api.create("q")
    payload = os.urandom(100_000)
    await api.produce("q", [{"bytes": base64.b64encode(payload).decode()}])
    async with connect(api) as conn:
        lease = {"queue_name": "q", "batch_size": 1, "client_id": "c", "request_timeout": "5s"}
        await conn.send("POST", "/v1/queue.lease", msgspec.json.encode(lease), **JSON)
        status, headers, body = await conn.reply()
        assert status == "HTTP/1.1 200 OK" and int(headers["content-length"]) > 100_000
        [item] = msgspec.json.decode(body)["items"]
        assert base64.b64decode(item["bytes"]) == payload
        # The connection is still in step: the next reply is read whole after it.
        await conn.send("POST", "/v1/queue.produce", PRODUCE, **JSON)
        assert (await conn.reply())[0] == "HTTP/1.1 200 OK"
