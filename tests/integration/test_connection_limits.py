"""Connection-level limits of a real ``querator serve`` (querator.connections, docs/semantics.md §1.3):
bodies over a route's limit refused before they are read, slow clients cut off, idle connections closed,
and the number of connections bounded, seen through raw sockets and the server's /proc entries.

The server's timeouts are set short by flag so the tests run fast; every wait is a poll or a blocking
read with a deadline. With ``-s`` the tests print the server's descriptors and memory they measured
(lines starting ``measured:``), the numbers of docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator

import msgspec
import pytest

from querator.auth import generate_key, key_hash
from querator.client import Client
from querator.config import ListenerConfig

from .conftest import ServerProcess, Servers, wait_until

MB = 1_000_000
CLOSE_DEADLINE = 30.0
"""Seconds a test waits for the server to close a connection; far above every timeout it sets."""


# --------------------------------------------------------------------------------------------------------
# The server process, from outside


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """Resident set size of ``pid`` in KiB (``VmRSS`` of /proc/<pid>/status; ``VmHWM``: its peak)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def accepted_connections(port: int) -> int:
    """Server-side TCP sockets of connections to ``port`` that are open or that the client has closed
    but the server not yet (/proc/net/tcp states ESTABLISHED and CLOSE_WAIT)."""
    count = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            local, state = line.split()[1], line.split()[3]
            if int(local.rsplit(":", 1)[1], 16) == port and state in ("01", "08"):
                count += 1
    return count


def settled_fds(server: ServerProcess) -> int:
    """The server's descriptor count once no client connection is open (the baseline of a test)."""
    assert server.port is not None
    port = server.port
    wait_until(lambda: accepted_connections(port) == 0, CLOSE_DEADLINE, "no connection left open")
    return open_fds(server.pid)


def measured(what: str, **numbers: object) -> None:
    print(f"measured: {what}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


# --------------------------------------------------------------------------------------------------------
# HTTP/1.1 over a raw socket, to send exactly what a hostile or slow client would


def connect(server: ServerProcess) -> socket.socket:
    assert server.port is not None
    return socket.create_connection(("127.0.0.1", server.port), timeout=CLOSE_DEADLINE)


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: querator", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class Response(msgspec.Struct):
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        data = msgspec.json.decode(self.body)
        assert isinstance(data, dict)
        return data


def read_response(sock: socket.socket) -> Response:
    """One response with a Content-Length body (what Querator sends); fails on EOF before its end."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        assert data, f"connection closed before a response head; got {buf!r}"
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    length = int(headers["content-length"])
    while len(rest) < length:
        data = sock.recv(65536)
        assert data, "connection closed in the middle of a response body"
        rest += data
    return Response(int(status_line.split()[1]), headers, rest[:length])


def closed_by_peer(sock: socket.socket, timeout: float) -> tuple[bool, bytes]:
    """Reads until the server closes the connection or ``timeout`` passes: (closed, what was read)."""
    deadline = time.monotonic() + timeout
    got = b""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return True, got
        if not data:
            return True, got
        got += data
    return False, got


def trickle_until_closed(
    sock: socket.socket, data: bytes, server: ServerProcess, deadline: float
) -> tuple[int, int]:
    """Sends ``data`` one byte at a time, waiting up to 0.1 s after each for the server to close the
    connection (the wait is the trickle's pace and the close's detection at once); between bytes a
    normal client is served by the same server. Returns (bytes sent, normal requests served)."""
    served = 0
    with Client(server.url) as normal:
        for sent, byte in enumerate(data):
            assert time.monotonic() < deadline, f"not closed after {sent} bytes trickled"
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                return sent, served
            readable, _, _ = select.select([sock], [], [], 0.1)
            if readable:
                closed, got = closed_by_peer(sock, 1.0)
                assert closed and got == b"", f"a reply to a request that never arrived whole: {got!r}"
                return sent + 1, served
            assert normal.health()["status"] == "pass"
            served += 1
    raise AssertionError("the whole request was sent before the server cut it off")


# --------------------------------------------------------------------------------------------------------
# Bodies over the limit


LIMITS = {
    "/v1/queue.produce": "request body exceeds 5.0MB limit",
    "/v1/queue.lease": "request body exceeds 12.8KB limit",
    "/v1/queue.complete": "request body exceeds 250.0KiB limit",
}


def test_a_huge_content_length_is_refused_before_the_body_is_sent(servers: Servers) -> None:
    server = servers.start("--storage", "memory")
    socks = {path: connect(server) for path in LIMITS}
    try:
        for path, sock in socks.items():
            # A terabyte announced, not a byte of it sent: the reply can only come from the header.
            sock.sendall(request_head("POST", path, {"Content-Length": str(10**12)}))
        for path, sock in socks.items():
            reply = read_response(sock)
            # docs/semantics.md §1.3: a body over the limit is a 400 (duh's error), not aiohttp's 413.
            assert reply.status == 400
            assert reply.json() == {"code": 400, "code_text": "Bad Request", "message": LIMITS[path]}
            assert reply.headers["connection"] == "close"
        for sock in socks.values():  # after aiohttp's lingering time (10 s) for the body that never comes
            closed, extra = closed_by_peer(sock, CLOSE_DEADLINE)
            assert closed and extra == b""
    finally:
        for sock in socks.values():
            sock.close()


def test_an_oversized_chunked_body_is_cut_off_in_bounded_memory(servers: Servers) -> None:
    server = servers.start("--storage", "memory")
    with Client(server.url) as client:
        client.create_queue("q")
    before = rss_kib(server.pid)
    chunk = b"x" * 65536
    frame = b"%x\r\n%b\r\n" % (len(chunk), chunk)
    total = 200 * 2**20
    sent = 0
    send_error: list[OSError] = []

    def send(sock: socket.socket) -> None:
        nonlocal sent
        try:
            while sent < total:
                sock.sendall(frame)
                sent += len(chunk)
            sock.sendall(b"0\r\n\r\n")
        except OSError as e:  # the server closed the connection before the whole body was sent
            send_error.append(e)

    with connect(server) as sock:
        body = {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
        sock.sendall(request_head("POST", "/v1/queue.produce", body))
        sender = threading.Thread(target=send, args=(sock,))
        sender.start()
        try:
            reply = read_response(sock)
            assert (reply.status, reply.json()["message"]) == (400, "request body exceeds 5.0MB limit")
            assert reply.headers["connection"] == "close"
            closed, _ = closed_by_peer(sock, CLOSE_DEADLINE)
            assert closed
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sender.join(CLOSE_DEADLINE)
    after = rss_kib(server.pid)
    measured(
        "RSS with a 200 MiB chunked produce body",
        rss_before_kib=before,
        rss_after_kib=after,
        sent_mib=sent // 2**20,
        sender_error=type(send_error[0]).__name__ if send_error else None,
    )
    assert after - before < 50 * 1024, f"RSS grew by {after - before} KiB for a 200 MiB body"
    with Client(server.url) as client:
        stats = client.stats("q")
        assert sum(p.total for lq in stats.logical_queues for p in lq.partitions) == 0


# --------------------------------------------------------------------------------------------------------
# Slow clients


SHORT = ("--storage", "memory", "--header-timeout", "1s", "--body-timeout", "1s", "--idle-timeout", "30s")


def trickled_head() -> tuple[bytes, bytes]:
    """Nothing sent at once; the request's line and headers trickled."""
    headers = {"Content-Type": "application/json", "X-Pad": "p" * 4000}
    return b"", request_head("POST", "/v1/queue.stats", headers)


def trickled_body() -> tuple[bytes, bytes]:
    """The headers sent at once; the body trickled."""
    body = msgspec.json.encode({"queue_name": "q" * 400})
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    return request_head("POST", "/v1/queue.stats", headers), body


@pytest.mark.parametrize(("part", "split"), [("headers", trickled_head), ("body", trickled_body)])
def test_a_trickled_request_is_cut_off(
    servers: Servers, part: str, split: Callable[[], tuple[bytes, bytes]]
) -> None:
    server = servers.start(*SHORT)
    at_once, trickled = split()
    started = time.monotonic()
    with connect(server) as sock:
        sock.sendall(at_once)
        sent, served = trickle_until_closed(sock, trickled, server, started + CLOSE_DEADLINE)
    measured(
        f"slow loris, {part}",
        timeout="1s",
        bytes_sent=sent,
        normal_requests_served=served,
        closed_after_s=round(time.monotonic() - started, 2),
    )
    assert sent < len(trickled)
    assert served > 0
    # A client cut off mid-request is its own doing: nothing for the operator's error log.
    assert "ERROR" not in server.stderr(), server.stderr()


def test_a_connection_that_sends_nothing_gets_the_header_timeout(servers: Servers) -> None:
    server = servers.start(*SHORT)  # idle timeout 30 s: only the header timeout can close it in time
    with connect(server) as sock:
        closed, got = closed_by_peer(sock, 15.0)
    assert closed and got == b""


def test_an_idle_kept_alive_connection_is_closed(servers: Servers) -> None:
    server = servers.start("--storage", "memory", "--idle-timeout", "1s", "--header-timeout", "30s")
    with connect(server) as sock:
        sock.sendall(request_head("GET", "/health", {}))
        assert read_response(sock).status == 200
        closed, got = closed_by_peer(sock, 15.0)  # the header timeout (30 s) cannot be what closes it
    assert closed and got == b""


@pytest.mark.parametrize("replies", ["openapi", "items"])
def test_a_client_that_stops_reading_its_replies_is_cut_off(servers: Servers, replies: str) -> None:
    """Requests sent, replies never read: once the replies fill the socket buffers, the write timeout
    (1 s) closes the connection; the header and idle timeouts (30 s) cannot be what does. Replies of the
    probes (aiohttp's) and of the API (``http.Reply``, which waits for the writer to drain) alike."""
    server = servers.start(
        "--storage", "memory", "--write-timeout", "1s", "--header-timeout", "30s", "--idle-timeout", "30s"
    )
    assert server.port is not None
    if replies == "openapi":
        # 200 pipelined requests for the 58 KB OpenAPI document: ~11 MB of replies, far above what the
        # two sockets and aiohttp's transport buffer hold.
        requests = request_head("GET", "/openapi.yaml", {}) * 200
    else:
        # 20 pipelined listings of 40 items of 100 KB: ~110 MB of replies (base64 in JSON), of which
        # the node must not hold more than a few at once (it waits for each to drain).
        with Client(server.url) as client:
            client.create_queue("q", lease_timeout="1m", expire_timeout="1h")
            for _ in range(8):  # bodies under 1 MB: aiohttp's client warns of larger ones
                client.produce("q", [os.urandom(100_000) for _ in range(5)])
        body = msgspec.json.encode({"queue_name": "q", "limit": 40})
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        requests = (request_head("POST", "/v1/storage/items.list", headers) + body) * 20
    rss_before = rss_kib(server.pid)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(requests)
        started = time.monotonic()
        wait_until(lambda: accepted_connections(server.port) == 0, 15.0, "the stalled connection closed")
        grown_mb = (rss_kib(server.pid, "VmHWM") - rss_before) / 1000  # the peak since, at the least
        measured(
            f"a client not reading its replies ({replies})",
            timeout="1s",
            closed_after_s=round(time.monotonic() - started, 2),
            peak_rss_growth_mb=grown_mb,
        )
    assert grown_mb < 50, "the replies were buffered, not waited for"
    assert "ERROR" not in server.stderr(), server.stderr()


def test_handling_is_not_timed_a_long_poll_waits_its_request_timeout(servers: Servers) -> None:
    server = servers.start(
        "--storage", "memory", "--header-timeout", "1s", "--body-timeout", "1s", "--idle-timeout", "1s"
    )
    with Client(server.url) as client:
        client.create_queue("q")
        # Not a dropped connection (ConnectionFailed): the server answered "no items" when the lease's
        # own timeout, three times the connection timeouts, ran out.
        assert client.lease("q", 1, "consumer", request_timeout="3s").items == []


# --------------------------------------------------------------------------------------------------------
# Many connections


@contextlib.contextmanager
def open_files(needed: int) -> Iterator[None]:
    """This process's open files limit raised to ``needed`` for the test (skips when the hard limit is
    lower); the servers it starts inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"needs {needed} open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_idle(server: ServerProcess, n: int) -> list[socket.socket]:
    """``n`` connections that send nothing."""
    socks = []
    try:
        for _ in range(n):
            socks.append(connect(server))
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def closed_ones(socks: list[socket.socket]) -> list[socket.socket]:
    """Those of ``socks`` the server has closed (readable now, and nothing but EOF or a reset to read)."""
    poller = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    closed = []
    for fd, _ in poller.poll(0):
        try:
            data = by_fd[fd].recv(1, socket.MSG_PEEK)
        except ConnectionResetError:
            data = b""
        assert data == b"", "the server sent something to a connection that sent nothing"
        closed.append(by_fd[fd])
    return closed


def served_normally(server: ServerProcess, queue: str) -> None:
    """A new queue created, an item produced, leased and completed: ordinary work, served."""
    with Client(server.url) as client:
        client.create_queue(queue)
        client.produce(queue, ["a"])
        lease = client.lease(queue, 1, "c", request_timeout="5s")
        assert [i.bytes for i in lease.items] == [b"a"]
        client.complete(queue, lease.partition, [i.id for i in lease.items])


def test_thousands_of_idle_connections_do_not_stop_service(servers: Servers) -> None:
    n = 2000
    with open_files(2 * n + 500):
        # Long timeouts: the idle connections stay while we look.
        server = servers.start(
            "--storage",
            "memory",
            "--max-connections",
            "2500",
            "--header-timeout",
            "5m",
            "--idle-timeout",
            "5m",
        )
        base_fds, base_rss = settled_fds(server), rss_kib(server.pid)
        socks = open_idle(server, n)
        try:
            wait_until(lambda: open_fds(server.pid) >= base_fds + n, CLOSE_DEADLINE, f"{n} accepted")
            served_normally(server, "while-idle")
            fds, rss = open_fds(server.pid), rss_kib(server.pid)
            measured(
                f"{n} idle connections, max-connections 2500",
                fds_before=base_fds,
                fds=fds,
                rss_before_kib=base_rss,
                rss_kib=rss,
                rss_per_connection_kib=round((rss - base_rss) / n, 1),
            )
            assert fds <= base_fds + n + 20
            assert closed_ones(socks) == []
        finally:
            for s in socks:
                s.close()
        wait_until(lambda: open_fds(server.pid) <= base_fds + 5, CLOSE_DEADLINE, "connections released")


def test_connections_beyond_the_limit_replace_the_longest_idle(servers: Servers) -> None:
    n, limit = 2000, ListenerConfig().max_connections  # the default, as the reference's: 1000
    with open_files(2 * n + 500):
        server = servers.start("--storage", "memory", "--header-timeout", "5m", "--idle-timeout", "5m")
        base_fds, base_rss = settled_fds(server), rss_kib(server.pid)
        socks = open_idle(server, n)
        try:
            refused: list[socket.socket] = []

            def all_refused() -> bool:
                refused[:] = closed_ones(socks)
                return len(refused) >= n - limit

            wait_until(all_refused, CLOSE_DEADLINE, f"{n - limit} connections closed by the server")
            # The oldest gave way to the newest: descriptors stay bounded, and a silent connection
            # holds no place a newcomer needs.
            assert len(refused) == n - limit
            assert {s.fileno() for s in refused} == {s.fileno() for s in socks[: n - limit]}
            fds, rss = open_fds(server.pid), rss_kib(server.pid)
            measured(
                f"{n} idle connections, max-connections {limit}",
                fds_before=base_fds,
                fds=fds,
                rss_before_kib=base_rss,
                rss_kib=rss,
                refused=len(refused),
            )
            assert fds <= base_fds + limit + 20
            served_normally(server, "at-the-limit")
        finally:
            for s in socks:
                s.close()
        # Room again: served as before.
        wait_until(lambda: open_fds(server.pid) <= base_fds + 5, CLOSE_DEADLINE, "connections released")


def kept_alive(server: ServerProcess, n: int) -> list[socket.socket]:
    """``n`` connections kept alive after one unauthenticated ``GET /health`` each."""
    socks = open_idle(server, n)
    for sock in socks:
        sock.sendall(request_head("GET", "/health", {}))
        assert read_response(sock).status == 200
    return socks


def parked_leases(server: ServerProcess, n: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """``n`` connections from ``source``, each holding a lease that long-polls an empty queue."""
    assert server.port is not None
    socks = []
    for i in range(n):
        sock = socket.create_connection(("127.0.0.1", server.port), CLOSE_DEADLINE, (source, 0))
        socks.append(sock)
        body = msgspec.json.encode(
            {"queue_name": "q", "batch_size": 1, "client_id": f"{source}-{i}", "request_timeout": "1m"}
        )
        head = request_head(
            "POST", "/v1/queue.lease", {"Content-Type": "application/json", "Content-Length": str(len(body))}
        )
        sock.sendall(head + body)
    with Client(server.url) as client:
        wait_until(
            lambda: client.stats("q").logical_queues[0].lease_waiting >= n, CLOSE_DEADLINE, "leases parked"
        )
    return socks


def test_idle_connections_do_not_lock_other_clients_out(servers: Servers) -> None:
    server = servers.start(
        "--storage", "memory", "--max-connections", "50", "--header-timeout", "5m", "--idle-timeout", "5m"
    )
    socks = kept_alive(server, 50)
    try:
        served_normally(server, "past-idle-connections")
        assert len(closed_ones(socks)) >= 1
    finally:
        for s in socks:
            s.close()


def test_a_new_connection_is_closed_at_once_when_every_one_is_busy(servers: Servers) -> None:
    server = servers.start("--storage", "memory", "--max-connections", "21")
    with Client(server.url) as client:
        client.create_queue("q")
    socks = parked_leases(server, 20)
    try:
        # The 21st sends a produce's headers and waits for "100 Continue": its body is due, so it is
        # busy with a request by the time the server accepts another connection.
        with connect(server) as body_due:
            body_due.sendall(
                request_head(
                    "POST",
                    "/v1/queue.produce",
                    {"Content-Type": "application/json", "Content-Length": "100", "Expect": "100-continue"},
                )
            )
            assert body_due.recv(100).startswith(b"HTTP/1.1 100 Continue")
            with connect(server) as refused:
                refused.sendall(request_head("GET", "/health", {}))
                closed, got = closed_by_peer(refused, CLOSE_DEADLINE)
                assert closed and got == b""
        # Once per episode of a full server, not once per refused connection.
        assert server.stderr().count("connection limit reached") == 1
    finally:
        for s in socks:
            s.close()


def test_one_client_address_cannot_take_every_connection(servers: Servers) -> None:
    server = servers.start("--storage", "memory", "--max-connections-per-client", "5")
    with Client(server.url) as client:
        client.create_queue("q")
    socks = parked_leases(server, 5, source="127.0.0.2")
    try:
        extra = socket.create_connection(("127.0.0.1", server.port), CLOSE_DEADLINE, ("127.0.0.2", 0))
        with extra:
            extra.sendall(request_head("GET", "/health", {}))
            closed, got = closed_by_peer(extra, CLOSE_DEADLINE)
            assert closed and got == b""
        served_normally(server, "another-address")  # from 127.0.0.1
        assert "connection limit reached for client 127.0.0.2" in server.stderr()
    finally:
        for s in socks:
            s.close()


# --------------------------------------------------------------------------------------------------------
# Connections without a valid key


NOT_LINGERING = 5.0
"""Seconds a test waits for something that aiohttp's lingering for an unread body (10 s, which held every
refused connection busy) would have delayed past it."""


def served_with_key(server: ServerProcess, key: str) -> bool:
    """Whether a new connection presenting ``key`` is served (False: closed unanswered, at the limit)."""
    body = b"{}"
    head = request_head(
        "POST",
        "/v1/queues.list",
        {
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            "Authorization": f"Bearer {key}",
        },
    )
    with connect(server) as sock:
        try:
            sock.sendall(head + body)
            got = sock.recv(65536, socket.MSG_PEEK)
        except (BrokenPipeError, ConnectionResetError):
            return False
        if not got:
            return False
        assert read_response(sock).status == 200
        return True


def test_unauthenticated_requests_holding_their_body_do_not_lock_clients_out(servers: Servers) -> None:
    """docs/security.md, "Connections": a request without a valid key is refused (401) from its headers,
    and its connection closed without its body read, so requests that announce a large body and never
    send it cannot hold every connection (the timeouts are long: they cannot be what frees them)."""
    key, limit = generate_key(), 8
    server = servers.start(
        *("--storage", "memory", "--api-keys", key_hash(key), "--max-connections", str(limit)),
        *("--header-timeout", "5m", "--body-timeout", "5m", "--idle-timeout", "5m"),
    )
    socks = open_idle(server, limit)
    try:
        for i, sock in enumerate(socks):
            wrong = (
                {"Authorization": f"Bearer {generate_key()}"} if i % 2 else {}
            )  # no key, or an unknown one
            headers = {"Content-Type": "application/json", "Content-Length": str(MB), **wrong}
            sock.sendall(request_head("POST", "/v1/queue.produce", headers))
        for sock in socks:
            reply = read_response(sock)
            assert reply.status == 401
            assert reply.headers["connection"] == "close"
        wait_until(lambda: served_with_key(server, key), NOT_LINGERING, "a client with a key served")
        for sock in socks:
            closed, extra = closed_by_peer(sock, NOT_LINGERING)
            assert closed and extra == b""
    finally:
        for s in socks:
            s.close()


def test_at_the_limit_the_address_holding_most_connections_gives_way(servers: Servers) -> None:
    """One address opening connection after connection evicts its own, not another client's older one."""
    server = servers.start("--storage", "memory", "--max-connections", "4", "--header-timeout", "5m")
    assert server.port is not None

    def from_(source: str) -> socket.socket:
        return socket.create_connection(("127.0.0.1", server.port), CLOSE_DEADLINE, (source, 0))

    head = request_head("GET", "/health", {})
    with from_("127.0.0.3") as other:
        other.sendall(head[:10])  # the oldest connection: its request's headers still coming
        flood = [from_("127.0.0.2") for _ in range(4)]  # the fourth is one too many
        try:
            closed: list[socket.socket] = []

            def one_closed() -> bool:
                closed[:] = closed_ones([other, *flood])
                return bool(closed)

            wait_until(one_closed, CLOSE_DEADLINE, "a connection evicted")
            assert closed == [flood[0]]
            other.sendall(head[10:])
            assert read_response(other).status == 200
        finally:
            for s in flood:
                s.close()
