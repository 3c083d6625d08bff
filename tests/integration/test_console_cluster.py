"""The console's cluster page on three real ``querator serve --cluster`` nodes and a real etcd: it shows
the members and the owner of each partition, and follows the ring when a node is killed, listing the
partitions this node took over among its recent hand-offs."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from querator.client import AsyncClient

from .browser import DESKTOP, WAIT_MS, browser, screenshot_path
from .conftest import Servers, kill9
from .etcd_server import EtcdServer
from .test_cluster import cluster_args, info

__all__ = ["browser"]  # the fixture, for pytest

pytestmark = pytest.mark.integration

PARTITIONS = 16  # node-2 owns 4; when it goes, the ring gives node-0 one of them, node-1 the rest


async def test_the_cluster_page_follows_the_ring(
    browser: Browser, servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    prefix = "/console-it"
    nodes = [
        await servers.astart(*cluster_args(etcd, f"node-{n}", tmp_path / f"d{n}", prefix)) for n in range(3)
    ]
    for node in nodes:  # sqlite: each node keeps its own queue records (Cassandra would share them)
        async with AsyncClient(node.url) as client:
            await client.create_queue("orders", partitions=PARTITIONS)
    page = await browser.new_page(viewport=DESKTOP)
    page.set_default_timeout(WAIT_MS)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    await page.goto(nodes[0].url + "/ui/#/cluster")

    members = page.locator("#members-table tbody tr")
    await expect(members).to_have_count(3)
    await expect(page.locator("#this-node")).to_have_text("node-0")
    owners = page.locator('#owners-table td[data-col="owner"]')
    await expect(owners).to_have_count(PARTITIONS)
    # The page shows what the node says: the owner of every partition.
    expected = {p.partition: p.owner for p in (await info(nodes[0], "orders")).partitions}
    assert set(expected.values()) == {"node-0", "node-1", "node-2"}
    await expect(owners).to_have_text([expected[n] for n in range(PARTITIONS)])
    for node_id in ("node-0", "node-1", "node-2"):
        await expect(page.locator(f'#members-table tr[data-node="{node_id}"]')).to_contain_text("serving")
    await expect(page.locator("#no-hand-offs")).to_be_visible()
    async with AsyncClient(nodes[0].url) as client:  # node-0 serves the queue: a ring change hands it off
        await client.produce("orders", ["x"])
    await page.screenshot(path=screenshot_path("cluster"), full_page=True)
    await page.get_by_label("Queue").fill("no-such")
    await expect(page.locator("#owners-table")).to_have_count(0)
    await page.get_by_label("Queue").fill("ord")
    await expect(owners).to_have_count(PARTITIONS)

    kill9(nodes[2])  # its etcd lease runs out (2 s), and with no grace period its partitions move
    await expect(members).to_have_count(2, timeout=3 * WAIT_MS)
    await expect(page.locator("#owners-table")).not_to_contain_text("node-2")
    after = {p.partition: p.owner for p in (await info(nodes[0], "orders")).partitions}
    assert set(after.values()) == {"node-0", "node-1"}
    await expect(owners).to_have_text([after[n] for n in range(PARTITIONS)])
    # The partitions node-2 had moved; the others stayed where they were (consistent hashing).
    moved = {n for n in range(PARTITIONS) if expected[n] != after[n]}
    assert moved == {n for n in range(PARTITIONS) if expected[n] == "node-2"}
    # node-0's own log lists the partitions it took over from node-2 (a busy machine may add lease
    # hand-offs, all given, to no node yet).
    taken = sorted(n for n in moved if after[n] == "node-0")
    assert taken, "the ring gives node-0 some of node-2's partitions"
    rows = page.locator('#hand-offs-table tr[data-direction="taken"]')
    await expect(rows).to_have_count(len(taken))
    assert sorted(int(p) for p in await rows.locator('td[data-col="partition"]').all_inner_texts()) == taken
    await expect(rows.locator('td[data-col="other"]')).to_have_text(["node-2"] * len(taken))
    await expect(rows.locator('td[data-col="direction"]')).to_have_text(["taken from"] * len(taken))
    await expect(rows.first).to_contain_text("the ring changed")
    await expect(rows.first.locator("time")).to_be_visible()
    await page.screenshot(path=screenshot_path("cluster-after-kill"), full_page=True)

    # One queue's page shows the same owners, per partition.
    await page.goto(nodes[0].url + "/ui/#/queue/orders")
    await expect(page.locator('#partitions-table td[data-col="owner"]')).to_have_text(
        [after[n] for n in range(PARTITIONS)]
    )
    assert problems == []
