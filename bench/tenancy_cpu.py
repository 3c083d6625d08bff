"""The server's CPU per request with tenancy off and on (docs/tenancy.md; recorded in docs/benchmarks-log.md).

Starts `querator serve` twice (memory storage): without tenancy, and with `--tenancy on` where the
client is an ordinary user with its own key, bound to NamespaceOwner in the queue's namespace (the
path with a key lookup and a permission check, not the bootstrap shortcut). Each run sends the same
requests (produce one item, lease one, complete it: the queue stays short) from `--clients` concurrent
clients and reads the
server process's user + system CPU time before and after: CPU time, not wall time, so other load on the
machine changes the figures less. Runs alternate off/on `--rounds` times. First it measures, in this
process, what tenancy adds to each request on its own: authenticating a key and authorizing one
permission, both from the caches (what every request but the first per key and TTL costs).

    python bench/tenancy_cpu.py --requests 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Server
from querator.auth import generate_key, key_hash
from querator.client import AsyncClient
from querator.clock import SystemClock
from querator.storage.memory import MemoryStore
from querator.tenancy import AS_SERVER, RequestContext, Tenancy
from querator.wire import messages as m

ACCESS_CALLS = 50_000


async def _access_cost() -> float:
    """Microseconds of CPU per authenticate + authorize, from warm caches."""
    tenancy = Tenancy(MemoryStore(), SystemClock())
    tenancy.enable([hashlib.sha256(BOOTSTRAP.encode()).digest()])
    await tenancy.start()
    try:
        # The set-up is the server's own work; the measured calls are a caller's.
        user_id = (await tenancy.create_user(AS_SERVER, m.UserCreateRequest(username="u"))).id
        await tenancy.create_namespace(AS_SERVER, m.NamespaceInfo(name="team"))
        binding = m.RoleBindingCreateRequest(namespace="team", role_name="NamespaceOwner", user_id=user_id)
        await tenancy.create_binding(AS_SERVER, binding)
        key = (await tenancy.create_key(AS_SERVER, m.APIKeyCreateRequest(user_id=user_id))).key
        header = "Bearer " + key
        started = time.process_time()
        for _ in range(ACCESS_CALLS):
            ctx = RequestContext(await tenancy.access.authenticate(header))
            await tenancy.authorize(ctx, "team", "queue.produce")
        return (time.process_time() - started) / ACCESS_CALLS * 1e6
    finally:
        await tenancy.stop()


async def _setup(server: Server, tenancy: bool) -> str:
    """The key the measured client uses ("" without tenancy), once the queue exists."""
    admin_key = BOOTSTRAP if tenancy else None
    async with AsyncClient(server.endpoint, api_key=admin_key) as admin:
        await server.wait_ready(admin)
        if not tenancy:
            await admin.create_queue("bench", partitions=1)
            return ""
        await admin.create_namespace("team")
        user_id = await admin.create_user("bench")
        await admin.create_role_binding("team", "NamespaceOwner", user_id)
        key = (await admin.create_api_key(user_id)).key
    async with AsyncClient(server.endpoint, api_key=key) as client:
        await client.create_queue("bench", partitions=1, namespace="team")
    return key


async def _measure(server: Server, key: str, requests: int, clients: int) -> float:
    """Server CPU microseconds per request over ``requests`` requests."""
    async with AsyncClient(server.endpoint, api_key=key or None, limit=clients) as client:
        per_client = requests // clients // 3

        async def work() -> None:
            for _ in range(per_client):
                await client.produce("bench", ["x"])
                lease = await client.lease("bench", batch_size=1, request_timeout="5s")
                if lease.items:
                    await client.complete("bench", lease.partition, [i.id for i in lease.items])

        await asyncio.gather(*(work() for _ in range(clients)))  # warm-up: caches, first-use paths
        before = server.cpu_seconds()
        await asyncio.gather(*(work() for _ in range(clients)))
        used = server.cpu_seconds() - before
    return used / (per_client * 3 * clients) * 1e6


BOOTSTRAP = generate_key("bench")


async def _run(tenancy: bool, requests: int, clients: int) -> float:
    extra = ["--tenancy", "on", "--api-keys", key_hash(BOOTSTRAP)] if tenancy else []
    server = Server("memory", "FULL", extra)
    try:
        key = await _setup(server, tenancy)
        return await _measure(server, key, requests, clients)
    finally:
        server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"authenticate + authorize (cached): {await _access_cost():.1f} us CPU", flush=True)
    results: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for tenancy in (False, True):
            results[tenancy].append(await _run(tenancy, args.requests, args.clients))
            print(
                f"tenancy {'on ' if tenancy else 'off'}: {results[tenancy][-1]:.1f} us CPU/request",
                flush=True,
            )
    off, on = statistics.median(results[False]), statistics.median(results[True])
    print(f"median: off {off:.1f} us, on {on:.1f} us, +{(on / off - 1) * 100:.1f}%")


if __name__ == "__main__":
    asyncio.run(main())
