"""``querator status``: a node or cluster at a glance: health, members, and the queues' items."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from querator.client import AsyncClient
from querator.wire import messages as m

MAX_QUEUES = 100
"""Queues whose items ``status`` counts (their stats are one call each); it says when there are more."""


def add_parser(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "status",
        help="summarise a node or cluster: health, members, queues and their items",
        description=f"Summarise a node or cluster: its health and version, the cluster's members, and the "
        f"items of the first {MAX_QUEUES} queues of a namespace (queued, leased, scheduled).",
        parents=common,
    )
    p.add_argument("--namespace", default="", help="the queues of this namespace (default _system)")


async def command(client: AsyncClient, args: argparse.Namespace) -> dict[str, Any]:
    health = await client.health()
    cluster = await client.cluster_info("", args.namespace)
    listed = await client.list_queues("", MAX_QUEUES + 1, args.namespace)
    shown = listed.items[:MAX_QUEUES]
    stats = await asyncio.gather(*(client.stats(q.queue_name) for q in shown))
    return {
        "endpoint": client.endpoint,
        "health": health.get("status", ""),
        "version": health.get("version", ""),
        "node_id": cluster.node_id,
        "members": [{"node_id": n.node_id, "address": n.address, "state": n.state} for n in cluster.members],
        "queues": [_queue(q, s) for q, s in zip(shown, stats, strict=True)],
        "more_queues": len(listed.items) > MAX_QUEUES,
    }


def _queue(info: m.QueueInfo, stats: m.QueueStatsResponse) -> dict[str, Any]:
    partitions = [p for logical in stats.logical_queues for p in logical.partitions]
    total = sum(p.total for p in partitions)
    leased = sum(p.total_leased for p in partitions)
    return {
        "queue": info.queue_name,
        "partitions": info.requested_partitions,
        "queued": total - leased,
        "leased": leased,
        "scheduled": sum(p.scheduled for p in partitions),
        "dead_queue": info.dead_queue,
    }
