"""Membership against a real etcd: join, see each other, refuse a duplicate id, leave, die, survive an etcd
restart, and stop serving before the lease can expire when etcd stops answering.

Each test has its own key prefix on the session's etcd. Nothing sleeps to synchronise: ``eventually``
polls until a deadline. Tests that pause or restart etcd leave it running.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from querator.cluster.etcd import EtcdClient
from querator.cluster.membership import Membership, MembershipError
from querator.config import ClusterConfig

from .conftest import eventually, server_env
from .etcd_server import EtcdServer

pytestmark = pytest.mark.integration

TTL = 3
"""Seconds: short, so expiry tests are quick; at least etcd's minimum lease TTL (2 s)."""
SETTLE = 10.0
"""Seconds any change may take to reach every member (a generous deadline for a loaded machine)."""


class Members:
    """Starts Membership instances under one test's prefix and stops whatever is left at teardown."""

    def __init__(self, etcd: EtcdServer) -> None:
        self.etcd = etcd
        self.prefix = "/test-" + uuid.uuid4().hex[:12]
        self.started: list[Membership] = []

    def config(self, node_id: str, ttl: int = TTL) -> ClusterConfig:
        return ClusterConfig(
            endpoints=(self.etcd.endpoint,),
            prefix=self.prefix,
            node_id=node_id,
            advertise_address=f"{node_id}.test:2319",
            lease_ttl=ttl,
        )

    async def start(self, node_id: str, ttl: int = TTL) -> Membership:
        membership = Membership(self.config(node_id, ttl))
        await membership.start()
        self.started.append(membership)
        return membership

    async def close(self) -> None:
        for membership in self.started:
            await membership.stop()


@pytest.fixture
async def members(etcd: EtcdServer) -> AsyncIterator[Members]:
    factory = Members(etcd)
    try:
        yield factory
    finally:
        await factory.close()


def holds(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    """A synchronous condition, for ``eventually``."""

    async def poll() -> bool:
        return check()

    return poll


def sees(membership: Membership, *node_ids: str) -> bool:
    return membership.members.node_ids == frozenset(node_ids)


async def all_see(memberships: list[Membership], *node_ids: str) -> None:
    async def check() -> bool:
        return all(sees(m, *node_ids) for m in memberships)

    await eventually(check, SETTLE, f"every member sees exactly {node_ids}")


async def test_members_see_each_other(members: Members) -> None:
    a = await members.start("node-a")
    assert sees(a, "node-a") and a.serving
    b = await members.start("node-b")
    c = await members.start("node-c")
    await all_see([a, b, c], "node-a", "node-b", "node-c")

    member_b = a.members.get("node-b")
    assert member_b is not None and member_b.address == "node-b.test:2319" and member_b.started_at > 0
    await eventually(
        holds(lambda: len({m.members for m in (a, b, c)}) == 1),
        SETTLE,
        "every member has the same member set at the same revision",
    )
    assert all(m.serving for m in (a, b, c))


async def test_changes_yields_each_new_member_set(members: Members) -> None:
    a = await members.start("node-a")
    seen: list[frozenset[str]] = []

    async def follow() -> None:
        async for member_set in a.changes():
            seen.append(member_set.node_ids)
            if len(member_set.members) == 3:
                return

    follower = asyncio.create_task(follow())
    await members.start("node-b")
    await members.start("node-c")
    await asyncio.wait_for(follower, SETTLE)
    assert seen[0] == {"node-a"} or seen[0] == {"node-a", "node-b"}
    assert seen[-1] == {"node-a", "node-b", "node-c"}


async def test_a_live_duplicate_node_id_is_refused(members: Members) -> None:
    a = await members.start("node-a")
    with pytest.raises(MembershipError, match="node id 'node-a' is already registered by a live node"):
        await members.start("node-a")
    assert a.serving
    member = a.members.get("node-a")
    assert member is not None and member.address == "node-a.test:2319"


async def test_leave_removes_the_member_at_once(members: Members) -> None:
    # A long TTL: if leaving waited for the lease to expire, the deadline below would pass first.
    a = await members.start("node-a", ttl=60)
    b = await members.start("node-b", ttl=60)
    await all_see([a, b], "node-a", "node-b")
    await b.stop()
    assert not b.serving
    await all_see([a], "node-a")


async def test_restarting_with_the_same_id_after_leaving(members: Members) -> None:
    a = await members.start("node-a")
    b = await members.start("node-b")
    await b.stop()
    b_again = await members.start("node-b")
    await all_see([a, b_again], "node-a", "node-b")


MEMBER_SCRIPT = """
import asyncio, sys
from querator.cluster.membership import Membership
from querator.config import ClusterConfig

async def main():
    endpoint, prefix, node_id, ttl = sys.argv[1:]
    config = ClusterConfig((endpoint,), prefix, node_id, node_id + ".test:2319", int(ttl))
    await Membership(config).start()
    print("joined", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_killed_member_disappears_after_its_lease_ttl(members: Members, tmp_path: Path) -> None:
    a = await members.start("node-a")
    with (tmp_path / "member.err").open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-c", MEMBER_SCRIPT, members.etcd.endpoint, members.prefix, "node-x", str(TTL)),
            env=server_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
    try:
        assert proc.stdout is not None
        assert await asyncio.wait_for(proc.stdout.readline(), SETTLE) == b"joined\n"
        await all_see([a], "node-a", "node-x")
        proc.kill()  # no revoke: only the lease's expiry can remove it
        await proc.wait()
        await all_see([a], "node-a")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_membership_survives_an_etcd_restart(members: Members, etcd: EtcdServer) -> None:
    a = await members.start("node-a")
    b = await members.start("node-b")
    await all_see([a, b], "node-a", "node-b")

    await asyncio.to_thread(etcd.stop)
    try:
        await eventually(holds(lambda: not (a.serving or b.serving)), TTL, "serving lost, etcd down")
    finally:
        await asyncio.to_thread(etcd.start)

    # The watches broke with the restart: a member joining now is only seen if they re-listed and
    # re-watched, and the members only serve again if their renewals resumed.
    c = await members.start("node-c")
    await all_see([a, b, c], "node-a", "node-b", "node-c")
    await eventually(holds(lambda: a.serving and b.serving and c.serving), SETTLE, "all serve again")
    await b.stop()
    await all_see([a, c], "node-a", "node-c")


async def test_a_member_whose_lease_is_lost_registers_again(members: Members, etcd: EtcdServer) -> None:
    a = await members.start("node-a")
    b = await members.start("node-b")
    async with aiohttp.ClientSession() as session:
        client = EtcdClient([etcd.endpoint], session)
        key = f"{members.prefix}/nodes/node-b".encode()
        listing = await client.get_prefix(key, SETTLE)
        first_lease = listing.kvs[0].lease
        # What etcd does to a lease it could not hear renewed for a TTL; revoking is just quicker.
        await client.revoke(first_lease, SETTLE)

        async def registered_again() -> bool:
            listing = await client.get_prefix(key, SETTLE)
            return bool(listing.kvs) and listing.kvs[0].lease != first_lease

        await eventually(registered_again, SETTLE, "node-b registered again with a new lease")
    await all_see([a, b], "node-a", "node-b")
    await eventually(holds(lambda: b.serving), SETTLE, "node-b serves again")


async def test_serving_is_lost_before_the_lease_can_expire_when_etcd_stops_answering(
    members: Members, etcd: EtcdServer
) -> None:
    a = await members.start("node-a")
    flips: list[bool] = []
    a.on_serving(flips.append)
    assert a.serving

    etcd.pause()
    try:
        # The lease lives at least a TTL from when etcd received the last renewal, shortly before the
        # pause: the node must give up serving within a TTL of the pause (it does at 2/3 of a TTL from
        # sending that renewal).
        await eventually(holds(lambda: not a.serving), TTL, "serving lost within one lease TTL")
    finally:
        etcd.resume()

    await eventually(holds(lambda: a.serving), SETTLE, "serving again once etcd answers")
    assert flips == [False, True]
    assert sees(a, "node-a")
