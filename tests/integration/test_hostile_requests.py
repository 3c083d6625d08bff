"""What a careless client or an attacker can send a real ``querator serve`` (issue 21): compressed bodies,
malformed requests, probes without a key, names at the limits of what is accepted, and storage lists of
a partition larger than a reply should hold. Raw sockets send exactly the bytes under test.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import struct
import threading
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import pytest

from querator.client import Client
from tests.conftest import ODD

from .conftest import ServerProcess, Servers, free_port, wait_until
from .test_connection_limits import closed_by_peer, connect, read_response, request_head
from .test_operations import apikey

REPLY_DEADLINE = 10.0
"""Seconds a test waits for a reply that should come at once."""
NOT_COMPRESSED = "Content-Encoding header '{}' is invalid; request bodies must not be compressed"
MALFORMED = {"code": 400, "code_text": "Bad Request", "message": "request is invalid; malformed HTTP request"}
MiB = 1024 * 1024


def post(server: ServerProcess, path: str, body: dict[str, Any], key: str = "") -> tuple[int, dict[str, Any]]:
    """POST ``body`` as JSON with every non-ASCII character escaped (``\\uXXXX``, as Go's and Python's
    encoders may write them: the largest a JSON body gets); (status, reply)."""
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    data = json.dumps(body, ensure_ascii=True).encode()
    request = urllib.request.Request(server.url + path, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=REPLY_DEADLINE) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(server: ServerProcess, path: str, key: str = "") -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(server.url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=REPLY_DEADLINE) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def cpu_seconds(pid: int) -> float:
    """User and system CPU time ``pid`` has used (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (USER_HZ = 100)


@cache
def gzip_bomb(gib: int = 1) -> bytes:
    """A gzip body of about 1 MB per GiB of zeros it inflates to (built from one 16 MiB block compressed
    once: after a full flush, deflate output does not depend on what came before)."""
    block = bytes(16 * MiB)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    count = 64 * gib
    crc = 0
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    trailer = struct.pack("<II", crc, (count * len(block)) & 0xFFFFFFFF)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + chunk * count + b"\x03\x00" + trailer


@contextlib.contextmanager
def sending(server: ServerProcess, head: bytes, body: bytes) -> Iterator[socket.socket]:
    """A connection that sends ``head`` then ``body`` from a thread (the server may close it early)."""
    sock = connect(server)

    def send() -> None:
        with contextlib.suppress(OSError):
            sock.sendall(head + body)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        yield sock
    finally:
        sock.close()
        sender.join()


# --------------------------------------------------------------------------------------------------------
# Compressed bodies


def compressed_head(path: str, encoding: str, length: int, key: str = "") -> bytes:
    headers = {
        "Content-Type": "application/json",
        "Content-Encoding": encoding,
        "Content-Length": str(length),
    }
    return request_head("POST", path, headers | ({"Authorization": f"Bearer {key}"} if key else {}))


def test_a_compressed_body_is_refused_before_it_is_sent(servers: Servers) -> None:
    server = servers.start("--storage", "memory")
    with Client(server.url) as client:
        client.create_queue("q")
    bomb = gzip_bomb()
    with connect(server) as sock:
        sock.settimeout(REPLY_DEADLINE)
        # Only the headers: the reply can come from them alone (before the fix, the server waited for the
        # body to inflate it, uncounted by the 5 MB limit).
        sock.sendall(compressed_head("/v1/queue.produce", "gzip", len(bomb)))
        reply = read_response(sock)
        assert (reply.status, reply.json()) == (
            400,
            {"code": 400, "code_text": "Bad Request", "message": NOT_COMPRESSED.format("gzip")},
        )
        assert reply.headers["connection"] == "close"
        with contextlib.suppress(OSError):
            sock.sendall(bomb)
        closed, extra = closed_by_peer(sock, REPLY_DEADLINE)
        assert closed and extra == b""
    with Client(server.url) as client:
        assert client.stats("q").logical_queues[0].partitions[0].total == 0


def test_gzip_bombs_are_not_inflated_with_a_key_or_without(servers: Servers) -> None:
    key, digest = apikey()
    server = servers.start("--storage", "memory", env={"QUERATOR_API_KEYS": digest})
    with Client(server.url, api_key=key) as client:
        client.create_queue("q")
    bomb = gzip_bomb()
    before = cpu_seconds(server.pid)
    # Four without a key, one with: each 1 MB on the wire, 1 GiB inflated (about 5 s of CPU each).
    heads = [compressed_head("/v1/queue.produce", "gzip", len(bomb))] * 4
    heads.append(compressed_head("/v1/queue.produce", "gzip", len(bomb), key))
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(sending(server, head, bomb)) for head in heads]
        # The node answers other clients while the bombs arrive.
        with Client(server.url) as other:
            assert other.health()["status"] == "pass"
        statuses = [read_response(sock).status for sock in socks]
    assert statuses == [401, 401, 401, 401, 400]
    # Nothing was inflated: a fraction of the CPU time a single bomb takes to inflate.
    assert cpu_seconds(server.pid) - before < 1.0
    with Client(server.url, api_key=key) as client:
        assert client.stats("q").logical_queues[0].partitions[0].total == 0


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "x-gzip", "GZIP, identity"])
def test_a_body_that_claims_a_compression_is_a_400(servers: Servers, encoding: str) -> None:
    server = servers.start("--storage", "memory")
    body = json.dumps({"queue_name": "q", "request_timeout": "1m", "items": [{"utf8": "x"}]}).encode()
    with connect(server) as sock:
        sock.settimeout(REPLY_DEADLINE)
        # Not compressed at all, as a careless client sends it: was a 500 (gzip) or text/plain (br).
        sock.sendall(compressed_head("/v1/queue.produce", encoding, len(body)) + body)
        reply = read_response(sock)
    assert (reply.status, reply.json()["message"]) == (400, NOT_COMPRESSED.format(encoding))


def test_identity_is_no_compression(servers: Servers) -> None:
    server = servers.start("--storage", "memory")
    with Client(server.url) as client:
        client.create_queue("q")
    body = json.dumps({"queue_name": "q", "request_timeout": "1m", "items": [{"utf8": "x"}]}).encode()
    with connect(server) as sock:
        sock.settimeout(REPLY_DEADLINE)
        sock.sendall(compressed_head("/v1/queue.produce", "identity", len(body)) + body)
        assert read_response(sock).status == 200


# --------------------------------------------------------------------------------------------------------
# Malformed requests


def malformed_requests(key: str) -> list[bytes]:
    return [
        # Bare LF line ends, with a key in a header that aiohttp quoted in its ERROR log.
        f"GET /health HTTP/1.1\nHost: q\nAuthorization: Bearer {key}\n\n".encode(),
        request_head("POST", "/v1/queue.stats", {"Authorization": f"Bearer {key}", "Content-Length": "x"}),
        b"HELLO\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: q\r\nBad Header\r\n\r\n",
    ]


def test_a_malformed_request_gets_the_error_body_and_a_brief_log_line(servers: Servers) -> None:
    key, digest = apikey()
    server = servers.start("--storage", "memory", env={"QUERATOR_API_KEYS": digest})
    for _ in range(5):
        for raw in malformed_requests(key):
            with connect(server) as sock:
                sock.settimeout(REPLY_DEADLINE)
                sock.sendall(raw)
                reply = read_response(sock)
                assert (reply.status, reply.json()) == (400, MALFORMED), raw
                assert reply.headers["content-type"] == "application/json"
    assert server.healthy()
    wait_until(lambda: "malformed request from" in server.stderr(), REPLY_DEADLINE, "a log line")
    log = server.stderr()
    assert key not in log and "Traceback" not in log and "ERROR" not in log
    # Rate limited: 20 malformed requests, sent within far less than the log interval (10 s).
    assert 1 <= log.count("malformed request from") <= 2, log


def test_unknown_paths_of_the_admin_address_get_the_error_body(servers: Servers) -> None:
    port = free_port()
    # Without the console the admin address serves the probes alone (with it, also the v1 routes the
    # console calls: docs/console.md).
    server = servers.start("--storage", "memory", "--admin-address", f"127.0.0.1:{port}", "--no-ui")
    admin_server = ServerProcess(server.proc, port, server.stdout_path, server.stderr_path, server.cwd)
    status, body = get(admin_server, "/nope")
    assert (status, json.loads(body)) == (
        400,
        {"code": 400, "code_text": "Bad Request", "message": "http method 'GET' not allowed; only POST"},
    )
    assert post(admin_server, "/v1/queue.stats", {"queue_name": "q"}) == (
        501,
        {"code": 501, "code_text": "Not Implemented", "message": "no such method; /v1/queue.stats"},
    )


# --------------------------------------------------------------------------------------------------------
# Probes with API keys and no admin address


def test_metrics_need_a_key_and_readiness_tells_only_its_status_without_one(servers: Servers) -> None:
    key, digest = apikey()
    server = servers.start("--storage", "memory", env={"QUERATOR_API_KEYS": digest})
    with Client(server.url, api_key=key) as client:
        client.create_queue("payroll")
        client.produce("payroll", ["x"])
    status, body = get(server, "/metrics")
    assert status == 401 and b"payroll" not in body
    assert json.loads(body)["message"].startswith("api key is invalid")
    status, body = get(server, "/metrics", key)
    assert status == 200 and b'querator_items_queued{queue="payroll"}' in body
    for who in ("", key):
        assert get(server, "/ready", who) == (200, b'{"status":"pass"}')
        assert get(server, "/health", who)[0] == 200


# --------------------------------------------------------------------------------------------------------
# Names


LONGEST = "\U00020000" * 512
"""A CJK name of the longest length accepted, each character outside the BMP: 12 bytes in JSON."""
DEAD = "\U00020001" * 512


def test_the_longest_names_work_on_every_route(servers: Servers) -> None:
    server = servers.start("--storage", "memory")
    for name in (DEAD, LONGEST):
        info = {"queue_name": name, "lease_timeout": "1m", "expire_timeout": "1h", "requested_partitions": 1}
        assert (
            post(server, "/v1/queues.create", info | ({"dead_queue": DEAD} if name == LONGEST else {}))[0]
            == 200
        )
    q = {"queue_name": LONGEST}

    def ok(path: str, body: dict[str, Any]) -> dict[str, Any]:
        status, reply = post(server, path, body)
        assert status == 200, (path, reply)
        return reply

    ok(
        "/v1/queue.produce",
        q | {"request_timeout": "1m", "items": [{"utf8": "a"}, {"utf8": "b"}, {"utf8": "c"}]},
    )
    lease = ok("/v1/queue.lease", q | {"batch_size": 3, "client_id": "\u4e00" * 64, "request_timeout": "5s"})
    first, second, third = (item["id"] for item in lease["items"])
    ok(
        "/v1/queue.renew",
        q | {"partition": 0, "ids": [first], "lease_timeout": "1m", "request_timeout": "1m"},
    )
    ok("/v1/queue.complete", q | {"partition": 0, "ids": [first], "request_timeout": "1m"})
    ok("/v1/queue.retry", q | {"partition": 0, "items": [{"id": second, "dead": True}]})
    ok("/v1/queue.stats", q)
    ok("/v1/queue.reload", q)
    ok("/v1/queue.redrive", {"queue_name": DEAD, "target_queue": LONGEST, "request_timeout": "1m"})
    ok("/v1/queues.info", q)
    ok("/v1/queues.update", q | {"lease_timeout": "2m"})
    ok("/v1/cluster.info", q)
    ok("/v1/cluster.refresh", q)
    listed = ok("/v1/storage/items.list", q | {"partition": 0})
    assert {i["payload"] for i in listed["items"]} == {"Yg==", "Yw=="}  # b (redriven back) and c (leased)
    ok("/v1/storage/scheduled.list", q | {"partition": 0})
    ok("/v1/storage/items.import", q | {"partition": 0, "items": [{"payload": "ZA=="}]})
    ok("/v1/storage/items.delete", q | {"partition": 0, "ids": [third]})
    ok("/v1/queue.clear", q | {"queue": True, "destructive": True})
    ok("/v1/queues.delete", q)
    ok("/v1/queues.delete", {"queue_name": DEAD})


@pytest.mark.parametrize("char", ODD, ids=[f"U+{ord(c):04X}" for c in ODD])
def test_names_with_control_or_invisible_characters_are_refused(servers: Servers, char: str) -> None:
    server = servers.start("--storage", "memory")
    info = {"lease_timeout": "1m", "expire_timeout": "1h", "requested_partitions": 1}
    found = f"found U+{ord(char):04X}"
    status, reply = post(server, "/v1/queues.create", info | {"queue_name": f"pay{char}roll"})
    assert (status, reply["message"]) == (
        400,
        f"queue name is invalid; cannot contain control or invisible characters, {found}",
    )
    status, reply = post(server, "/v1/queues.create", info | {"queue_name": "q", "namespace": f"a{char}"})
    assert (
        status == 400
        and reply["message"].startswith("namespace name is invalid; ")
        and found in reply["message"]
    )
    with Client(server.url) as client:
        assert client.list_queues().items == []


# --------------------------------------------------------------------------------------------------------
# Storage lists


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
@pytest.mark.parametrize("path", ["/v1/storage/items.list", "/v1/storage/scheduled.list"])
def test_storage_lists_are_paged_by_payload_bytes_and_count(
    servers: Servers, storage: str, path: str
) -> None:
    server = servers.start("--storage", storage)
    scheduled = path.endswith("scheduled.list")
    with Client(server.url) as client:
        client.create_queue("q", partitions=1)
        for n in range(6):  # 1 MiB each: a page (4 MiB of payloads) holds four
            item = {"bytes": base64.b64encode(bytes([n]) * MiB).decode()}
            if scheduled:
                item["enqueue_at"] = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
            body = {"queue_name": "q", "request_timeout": "1m", "items": [item]}
            assert post(server, "/v1/queue.produce", body) == (200, {"code": 200})
        status, reply = post(server, path, {"queue_name": "q", "partition": 0, "limit": 65537})
        assert (status, reply["message"]) == (
            400,
            "limit is invalid; cannot be greater than 65536",
        )
        lister = client.list_scheduled if scheduled else client.list_items
        first = lister("q", 0, limit=100).items
        assert len(first) == 4
        # The caller pages on with the last id as pivot (inclusive), as the reference's clients do.
        rest = lister("q", 0, pivot=first[-1].id, limit=100).items
        assert rest[0].id == first[-1].id and len(rest) == 3
        assert [i.payload[0] for i in first + rest[1:]] == list(range(6))
        assert len(lister("q", 0, limit=2).items) == 2


# --------------------------------------------------------------------------------------------------------
# Host names (DNS rebinding)


def for_host(port: int, host: str, method: str, path: str, key: str = "") -> tuple[int, bytes]:
    """``method path`` sent to ``port`` with ``Host: host`` (a POST with an empty JSON body); (status,
    body)."""
    headers = [f"Host: {host}", "Content-Type: application/json", "Content-Length: 2"]
    headers += [f"Authorization: Bearer {key}"] if key else []
    head = "\r\n".join([f"{method} {path} HTTP/1.1", *headers]) + "\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=REPLY_DEADLINE) as sock:
        sock.sendall(head.encode() + (b"{}" if method == "POST" else b""))
        reply = read_response(sock)
    return reply.status, reply.body


def rebound(host: str) -> str:
    return f"host is not allowed; '{host}' is not a name of this node (--allowed-hosts)"


def test_a_keyless_node_answers_its_own_host_names_only(servers: Servers) -> None:
    """docs/configuration.md, "Host names": a page that rebinds its own name to a keyless node's address
    reaches it with that name as Host, and is refused, on the API and the admin address alike."""
    admin = free_port()
    server = servers.start(
        *("--storage", "memory", "--admin-address", f"127.0.0.1:{admin}"),
        *("--allowed-hosts", "queue.example.com,.corp.example"),
    )
    assert server.port is not None
    port = server.port
    for at, method, path in (
        (port, "POST", "/v1/queues.list"),
        (port, "GET", "/health"),
        (admin, "GET", "/metrics"),
    ):
        status, body = for_host(at, f"evil.example:{at}", method, path)
        assert (status, json.loads(body)["message"]) == (403, rebound(f"evil.example:{at}"))
    for host in (
        f"localhost:{port}",
        f"127.0.0.1:{port}",
        "querator",
        "queue.example.com",
        "n1.corp.example:80",
    ):
        assert for_host(port, host, "POST", "/v1/queues.list")[0] == 200, host
    assert for_host(admin, f"127.0.0.1:{admin}", "GET", "/metrics")[0] == 200
    assert f"refusing requests for host 'evil.example:{port}'" in server.stderr()


def test_with_api_keys_the_host_is_not_checked(servers: Servers) -> None:
    """A rebinding page cannot present a key: with keys the key decides, whatever the Host."""
    key, key_hash = apikey()
    server = servers.start("--storage", "memory", "--api-keys", key_hash)
    assert server.port is not None
    assert for_host(server.port, "evil.example", "POST", "/v1/queues.list")[0] == 401
    assert for_host(server.port, "evil.example", "POST", "/v1/queues.list", key)[0] == 200
