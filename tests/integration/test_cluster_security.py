"""What a cluster trusts: real ``querator serve --cluster`` processes on a real etcd, and strangers.

- A stranger registered in etcd as a member (a key with a lease, as a node's) is forwarded requests: it
  never sees the cluster secret, and its acknowledgements are refused (the owner's reply must be signed).
- A forwarded request carrying the cluster secret in clear, as nodes used to send it, is refused.
- A signed forward is served once: a replay, a stale time, another body or a forward signed for another
  node is refused, and the owner signs its reply.
- A member key without a lease (put by hand, or a node's key overwritten without one) is no member.
- With TLS: clients and nodes talk HTTPS; nodes verify each other's certificates (a stranger whose
  certificate another CA signed is never sent the request) and, with mutual TLS, a forward without a
  client certificate of the cluster's CA is refused even when its signature is right.
- etcd with TLS, client certificates and user authentication: nodes join with a user that may only
  write their prefix, keep working across an etcd restart (which forgets every auth token), and a
  wrong password stops a node at start.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest
from aiohttp import web

from querator.auth import FORWARDED_HEADER, generate_key, key_hash
from querator.client import AsyncClient
from querator.cluster.etcd import EtcdClient
from querator.cluster.ring import Ring
from querator.errors import LeaseTimedOut, QueratorError, RetryRequest
from querator.wire import messages as m

from .certs import Authority, Issued
from .conftest import ServerProcess, Servers, eventually, free_port, server_env
from .etcd_server import EtcdServer, EtcdTls, etcd_binary

pytestmark = pytest.mark.integration

T = TypeVar("T")
DEADLINE = 30.0
KEY = generate_key()
JSON = {"Content-Type": "application/json"}


class Stranger:
    """An HTTP(S) server that answers every request with a 200 and records what it was sent."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self.port = free_port()
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self._runner: web.AppRunner | None = None

    async def _answer(self, request: web.Request) -> web.Response:
        self.received.append((request.path, dict(request.headers), await request.read()))
        return web.json_response({"code": 200, "code_text": "OK", "message": ""})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self.tls).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def stranger() -> AsyncIterator[Stranger]:
    server = Stranger()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


def secret_file(tmp_path: Path) -> tuple[Path, bytes]:
    secret = secrets.token_hex(32).encode()
    path = tmp_path / "cluster-secret"
    path.write_bytes(secret)
    return path, secret


def node_args(etcd: EtcdServer, prefix: str, node_id: str, data: Path, secret: Path) -> tuple[str, ...]:
    return (
        "--storage", "sqlite", "--data-dir", str(data), "--cluster", etcd.cluster_url(prefix),
        "--node-id", node_id, "--etcd-lease-ttl", "2s", "--cluster-grace-period", "0s",
        "--api-keys", key_hash(KEY), "--cluster-secret-file", str(secret),
    )  # fmt: skip


async def member_ids(node: ServerProcess) -> list[str]:
    async with AsyncClient(node.url, api_key=KEY) as client:
        return [mm.node_id for mm in (await client.cluster_info()).members]


async def sees(node: ServerProcess, *node_ids: str) -> None:
    async def check() -> bool:
        return sorted(await member_ids(node)) == sorted(node_ids)

    await eventually(check, DEADLINE, f"{node.url} sees {node_ids}")


def queue_owned_by(owner: str, node_ids: list[str]) -> str:
    """A queue name whose one partition the ring of ``node_ids`` gives to ``owner``."""
    ring = Ring(node_ids, 0)
    return next(f"q{n}" for n in range(1000) if ring.owner(f"q{n}", 0) == owner)


@contextlib.asynccontextmanager
async def registered(etcd: EtcdServer, prefix: str, stranger: Stranger) -> AsyncIterator[None]:
    """The stranger listed as member ``stranger``, as whoever may write etcd can do: a key attached to a
    lease of its own, like a node's."""
    async with aiohttp.ClientSession() as session:
        etcd_client = EtcdClient([etcd.endpoint], session)
        lease = await etcd_client.grant(30, DEADLINE)
        registration = json.dumps({"address": f"127.0.0.1:{stranger.port}", "started_at": 0}).encode()
        await etcd_client.create(f"{prefix}/nodes/stranger".encode(), registration, lease.id, DEADLINE)
        try:
            yield
        finally:
            await etcd_client.revoke(lease.id, DEADLINE)


async def test_a_member_without_the_secret_cannot_acknowledge_forwards(
    servers: Servers, etcd: EtcdServer, stranger: Stranger, tmp_path: Path
) -> None:
    secret_path, secret = secret_file(tmp_path)
    node = await servers.astart(*node_args(etcd, "/stranger", "node-0", tmp_path / "d", secret_path))
    queue = queue_owned_by("stranger", ["node-0", "stranger"])
    async with AsyncClient(node.url, api_key=KEY) as client:
        await client.create_queue(queue, partitions=1)
    async with registered(etcd, "/stranger", stranger):
        await sees(node, "node-0", "stranger")
        async with AsyncClient(node.url, api_key=KEY) as client:
            with pytest.raises(RetryRequest, match="did not sign its reply"):
                await client.produce(queue, ["acknowledged by nobody"])
    assert stranger.received, "the produce was not forwarded to the stranger"
    for _path, headers, _body in stranger.received:
        assert all(secret.decode() not in value for value in headers.values()), headers
        assert headers[FORWARDED_HEADER] == "node-0"


async def test_a_forward_with_the_secret_in_clear_is_refused(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    secret_path, secret = secret_file(tmp_path)
    node = await servers.astart(*node_args(etcd, "/clear", "node-0", tmp_path / "d", secret_path))
    headers = {**JSON, FORWARDED_HEADER: "node-1", "X-Querator-Cluster-Secret": secret.decode()}
    async with (
        aiohttp.ClientSession() as session,
        session.post(node.url + "/v1/queues.list", data=b"{}", headers=headers) as resp,
    ):
        reply = await resp.json()
    assert resp.status == 454, reply
    assert "carries the cluster secret in clear" in reply["message"]


async def test_a_signed_forward_is_served_once_and_its_reply_signed(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    from querator.auth import REPLY_SIGNATURE_HEADER, SIGNATURE_HEADER, ClusterAuth
    from querator.clock import FakeClock

    secret_path, secret = secret_file(tmp_path)
    node = await servers.astart(*node_args(etcd, "/signed", "node-0", tmp_path / "d", secret_path))
    peer = ClusterAuth(secret, "node-1")
    path, body = "/v1/queues.list", b'{"limit": 10}'

    async def send(headers: dict[str, str], data: bytes = body) -> tuple[int, dict[str, str], bytes]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(node.url + path, data=data, headers={**JSON, **headers}) as resp,
        ):
            return resp.status, dict(resp.headers), await resp.read()

    signature, mac = peer.sign("node-0", "POST", path, body)
    signed = {FORWARDED_HEADER: "node-1", SIGNATURE_HEADER: signature}
    status, headers, reply = await send(signed)
    assert status == 200, reply
    assert peer.reply_is_authentic(
        mac, status, headers["Content-Type"], reply, headers[REPLY_SIGNATURE_HEADER]
    )

    status, _, reply = await send(signed)
    assert (status, json.loads(reply)["message"]) == (
        401,
        "forwarded request is invalid; it was received before (a replay)",
    )

    other_body, _ = peer.sign("node-0", "POST", path, body)
    status, _, reply = await send({**signed, SIGNATURE_HEADER: other_body}, b'{"limit": 11}')
    assert (status, json.loads(reply)["message"]) == (
        401,
        "forwarded request is invalid; its body does not match its signature",
    )

    for_another, _ = peer.sign("node-2", "POST", path, body)
    by_another = {FORWARDED_HEADER: "node-3", SIGNATURE_HEADER: peer.sign("node-0", "POST", path, body)[0]}
    for headers in ({**signed, SIGNATURE_HEADER: for_another}, by_another):
        status, _, reply = await send(headers)
        assert (status, json.loads(reply)["message"]) == (
            401,
            "forwarded request is invalid; its signature does not match",
        )

    # A minute behind: a node's clock too far from the owner's, or a recording played back later.
    late = FakeClock()
    late.jump(-60)
    stale, _ = ClusterAuth(secret, "node-1", late).sign("node-0", "POST", path, body)
    status, _, reply = await send({**signed, SIGNATURE_HEADER: stale})
    assert status == 401
    assert json.loads(reply)["message"].startswith("forwarded request is invalid; its time is more than 30s")

    status, _, reply = await send({FORWARDED_HEADER: "node-1"})
    assert (status, json.loads(reply)["message"]) == (
        401,
        "forwarded request is invalid; it has no signature",
    )


async def test_queues_created_through_forwards_reach_every_node(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    """Two real nodes with a secret forward to each other both ways (signed requests, signed replies)."""
    secret_path, _ = secret_file(tmp_path)
    nodes = [
        await servers.astart(*node_args(etcd, "/pair", f"node-{n}", tmp_path / f"d{n}", secret_path))
        for n in range(2)
    ]
    for node in nodes:
        await sees(node, "node-0", "node-1")
    queues = {owner: queue_owned_by(owner, ["node-0", "node-1"]) for owner in ("node-0", "node-1")}
    for owner, queue in queues.items():
        for node in nodes:  # sqlite: each node keeps its own queue records
            async with AsyncClient(node.url, api_key=KEY) as client:
                await client.create_queue(queue, partitions=1)
        other = nodes[1] if owner == "node-0" else nodes[0]
        async with AsyncClient(other.url, api_key=KEY) as client:
            await _retried(lambda c=client, q=queue: c.produce(q, ["forwarded"]))
            reply = await _lease_some(client, queue)
            assert [i.bytes for i in reply.items] == [b"forwarded"]
            await client.complete(queue, reply.partition, [i.id for i in reply.items])


async def _lease_some(client: AsyncClient, queue: str) -> m.QueueLeaseResponse:
    """A lease of at least one item, leasing again (until ``DEADLINE``) while there is none yet."""

    async def some() -> m.QueueLeaseResponse:
        reply = await client.lease(queue, batch_size=1, client_id="c", request_timeout="1s")
        if not reply.items:
            raise LeaseTimedOut()
        return reply

    return await _retried(some)


async def _retried(call: Callable[[], Awaitable[T]]) -> T:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while True:
        try:
            return await call()
        except RetryRequest:
            if asyncio.get_running_loop().time() > deadline:
                raise


async def put_without_lease(etcd: EtcdServer, key: bytes, value: bytes) -> None:
    """What anyone allowed to write etcd can do: a plain put, attached to no lease."""
    body = {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()}
    async with (
        aiohttp.ClientSession() as session,
        session.post(etcd.endpoint + "/v3/kv/put", json=body) as resp,
    ):
        assert resp.status == 200, await resp.text()


async def test_member_keys_without_a_lease_are_ignored(
    servers: Servers, etcd: EtcdServer, stranger: Stranger, tmp_path: Path
) -> None:
    secret_path, _ = secret_file(tmp_path)
    node = await servers.astart(*node_args(etcd, "/unleased", "node-0", tmp_path / "d", secret_path))
    registration = json.dumps({"address": f"127.0.0.1:{stranger.port}", "started_at": 0}).encode()
    await put_without_lease(etcd, b"/unleased/nodes/intruder", registration)
    async with aiohttp.ClientSession() as session:
        etcd_client = EtcdClient([etcd.endpoint], session)
        lease = await etcd_client.grant(30, DEADLINE)
        try:
            # A leased key put after the other: once the node lists it, it has seen both.
            await etcd_client.create(b"/unleased/nodes/visitor", registration, lease.id, DEADLINE)
            await sees(node, "node-0", "visitor")
            # The same key overwritten without its lease stops being a member too.
            await put_without_lease(etcd, b"/unleased/nodes/visitor", registration)
            await sees(node, "node-0")
        finally:
            await etcd_client.revoke(lease.id, DEADLINE)
    # A node that starts later lists the unleased keys and ignores them as well.
    late = await servers.astart(*node_args(etcd, "/unleased", "node-1", tmp_path / "d1", secret_path))
    await sees(late, "node-0", "node-1")


def tls_args(ca: Authority, issued: Issued) -> tuple[str, ...]:
    """HTTPS on the API address; nodes verify each other against ``ca`` and present ``issued``."""
    cert, key = str(issued.cert), str(issued.key)
    return (
        "--tls-cert-file", cert, "--tls-key-file", key, "--tls-client-ca-file", str(ca.cert),
        "--cluster-tls-ca-file", str(ca.cert), "--cluster-tls-cert-file", cert, "--cluster-tls-key-file", key,
    )  # fmt: skip


async def start_tls_node(
    servers: Servers, args: tuple[str, ...], ca: Authority, node_id: str
) -> tuple[ServerProcess, str]:
    """A node serving HTTPS (health on a plain admin address); returns it and its API URL."""
    api, admin = free_port(), free_port()
    node = await servers.astart(
        *args, *tls_args(ca, ca.issue(node_id)), "--address", f"127.0.0.1:{api}",
        "--admin-address", f"127.0.0.1:{admin}", address_flag=False, port=admin,
    )  # fmt: skip
    return node, f"https://127.0.0.1:{api}"


async def test_nodes_talk_tls_and_verify_each_other(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    secret_path, secret = secret_file(tmp_path)
    ca, other_ca = Authority(tmp_path / "ca", "cluster"), Authority(tmp_path / "other", "other")
    trusted = ca.client_context()
    urls = {}
    for n in range(2):
        args = node_args(etcd, "/tls", f"node-{n}", tmp_path / f"d{n}", secret_path)
        _, urls[f"node-{n}"] = await start_tls_node(servers, args, ca, f"node-{n}")

    async def both_see_both() -> bool:
        for url in urls.values():
            async with AsyncClient(url, api_key=KEY, ssl=trusted) as client:
                if len((await client.cluster_info()).members) != 2:
                    return False
        return True

    await eventually(both_see_both, DEADLINE, "both nodes see each other")
    queue = queue_owned_by("node-1", ["node-0", "node-1"])
    for url in urls.values():
        async with AsyncClient(url, api_key=KEY, ssl=trusted) as client:
            await client.create_queue(queue, partitions=1)
    # Through node-0, which owns nothing of the queue: every call is forwarded to node-1 over TLS.
    async with AsyncClient(urls["node-0"], api_key=KEY, ssl=trusted) as client:
        await _retried(lambda: client.produce(queue, ["over tls"]))
        reply = await _lease_some(client, queue)
        assert [i.bytes for i in reply.items] == [b"over tls"]
        await client.complete(queue, reply.partition, [i.id for i in reply.items])

    # Plain HTTP on the API address gets no answer.
    plain = urls["node-0"].replace("https://", "http://")
    async with AsyncClient(plain, api_key=KEY) as client:
        with pytest.raises(QueratorError):
            await client.cluster_info()

    # A forward signed with the secret, but without a client certificate of the cluster's CA.
    from querator.auth import SIGNATURE_HEADER, ClusterAuth

    path, body = "/v1/queues.list", b"{}"

    async def forward(context: ssl.SSLContext) -> tuple[int, str]:
        signature, _ = ClusterAuth(secret, "node-0").sign("node-1", "POST", path, body)
        headers = {**JSON, FORWARDED_HEADER: "node-0", SIGNATURE_HEADER: signature}
        async with (
            aiohttp.ClientSession() as session,
            session.post(urls["node-1"] + path, data=body, headers=headers, ssl=context) as resp,
        ):
            return resp.status, (await resp.json()).get("message", "")

    assert await forward(trusted) == (
        401,
        "forwarded request is invalid; it came without a client certificate",
    )
    assert (await forward(ca.client_context(ca.issue("node-9"))))[0] == 200
    with pytest.raises(aiohttp.ClientError):  # a certificate of another CA fails the handshake
        await forward(other_ca.client_context(other_ca.issue("intruder")))


async def test_a_stranger_without_a_certificate_of_the_cluster_gets_nothing(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    secret_path, _ = secret_file(tmp_path)
    ca, other_ca = Authority(tmp_path / "ca", "cluster"), Authority(tmp_path / "other", "other")
    args = node_args(etcd, "/tls-stranger", "node-0", tmp_path / "d", secret_path)
    _, url = await start_tls_node(servers, args, ca, "node-0")
    imposter = other_ca.issue("stranger")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(str(imposter.cert), str(imposter.key))
    stranger = Stranger(tls)
    await stranger.start()
    queue = queue_owned_by("stranger", ["node-0", "stranger"])
    try:
        async with AsyncClient(url, api_key=KEY, ssl=ca.client_context()) as client:
            await client.create_queue(queue, partitions=1)
            async with registered(etcd, "/tls-stranger", stranger):

                async def listed() -> bool:
                    return len((await client.cluster_info()).members) == 2

                await eventually(listed, DEADLINE, "node-0 lists the stranger")
                with pytest.raises(RetryRequest, match="did not answer"):
                    await client.produce(queue, ["for nobody"])
    finally:
        await stranger.close()
    assert stranger.received == []


@pytest.fixture
async def secure_etcd(tmp_path: Path) -> AsyncIterator[tuple[EtcdServer, Authority, Issued]]:
    """An etcd of its own with TLS, client certificates and authentication; user ``querator`` may read
    and write ``/secure/`` only. Yields it, its CA and the client certificate nodes present."""
    binary = etcd_binary()
    if binary is None:
        pytest.skip("no etcd binary")
    ca = Authority(tmp_path / "etcd-ca", "etcd")
    server_cert, client = ca.issue("etcd"), ca.issue("querator-etcd-client", common_name=False)
    tls = EtcdTls(server_cert.cert, server_cert.key, ca.cert, ca.client_context(client))
    server = EtcdServer(binary, tmp_path / "etcd-data", tls)
    await asyncio.to_thread(server.start)
    try:
        prefix = base64.b64encode(b"/secure/").decode()
        steps = [
            ("user/add", {"name": "root", "password": "root-password"}),
            ("user/grant", {"user": "root", "role": "root"}),
            ("user/add", {"name": "querator", "password": "s3cret"}),
            ("role/add", {"name": "querator"}),
            (
                "role/grant",
                {
                    "name": "querator",
                    "perm": {
                        "permType": "READWRITE",
                        "key": prefix,
                        "range_end": base64.b64encode(b"/secure0").decode(),
                    },
                },
            ),
            ("user/grant", {"user": "querator", "role": "querator"}),
            ("enable", {}),
        ]
        async with aiohttp.ClientSession() as session:
            for path, body in steps:
                url = f"{server.endpoint}/v3/auth/{path}"
                async with session.post(url, json=body, ssl=tls.client) as resp:
                    assert resp.status == 200, (path, await resp.text())
        yield server, ca, client
    finally:
        await asyncio.to_thread(server.stop)


def secure_args(
    etcd: EtcdServer, ca: Authority, client: Issued, password: Path, node_id: str
) -> tuple[str, ...]:
    return (
        "--storage", "memory", "--cluster", etcd.cluster_url("/secure"), "--node-id", node_id,
        "--etcd-lease-ttl", "2s", "--cluster-grace-period", "0s",
        "--etcd-tls-ca-file", str(ca.cert), "--etcd-tls-cert-file", str(client.cert),
        "--etcd-tls-key-file", str(client.key), "--etcd-username", "querator",
        "--etcd-password-file", str(password),
    )  # fmt: skip


async def test_nodes_use_etcd_over_tls_with_a_user(
    servers: Servers, secure_etcd: tuple[EtcdServer, Authority, Issued], tmp_path: Path
) -> None:
    etcd, ca, client = secure_etcd
    password = tmp_path / "etcd-password"
    password.write_text("s3cret\n")
    first = await servers.astart(*secure_args(etcd, ca, client, password, "node-0"))
    await sees(first, "node-0")
    # A restarted etcd has forgotten every token: the node authenticates again and goes on.
    await asyncio.to_thread(etcd.restart)
    second = await servers.astart(*secure_args(etcd, ca, client, password, "node-1"))
    for node in (first, second):
        await sees(node, "node-0", "node-1")

    password.write_text("wrong")
    refused = servers.spawn(
        *secure_args(etcd, ca, client, password, "node-2"), "--address", f"127.0.0.1:{free_port()}"
    )
    assert await asyncio.to_thread(refused.wait, DEADLINE) == 2, refused.describe()
    assert "cluster is unavailable; " in refused.stderr(), refused.stderr()
    assert "authentication failed" in refused.stderr(), refused.stderr()


def test_the_cli_reaches_a_node_whose_certificate_a_private_ca_issued(
    servers: Servers, tmp_path: Path
) -> None:
    ca = Authority(tmp_path / "ca", "private")
    issued = ca.issue("node")
    api, admin = free_port(), free_port()
    servers.start(
        "--tls-cert-file", str(issued.cert), "--tls-key-file", str(issued.key),
        "--address", f"127.0.0.1:{api}", "--admin-address", f"127.0.0.1:{admin}",
        address_flag=False, port=admin,
    )  # fmt: skip
    endpoint = f"https://127.0.0.1:{api}"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "querator.cli", "--endpoint", endpoint, *args]
        env = server_env()
        return subprocess.run(command, check=False, capture_output=True, text=True, env=env, timeout=DEADLINE)

    untrusted = cli("create", "q")
    assert untrusted.returncode == 3, untrusted.stderr
    assert "certificate verify failed" in untrusted.stderr
    trusted = cli("--ca-file", str(ca.cert), "create", "q")
    assert trusted.returncode == 0, trusted.stderr
    unreadable = cli("--ca-file", str(tmp_path / "missing.pem"), "info", "q")
    assert unreadable.returncode == 2
    assert unreadable.stderr.startswith("querator: ca-file is invalid; cannot load"), unreadable.stderr
