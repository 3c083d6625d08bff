"""Prometheus metrics (extensions.md): per-queue gauges and counters, per-route latency histograms, and
the node's place in the cluster (docs/cluster.md, "Metrics").

A node exports what it runs: the queues whose engines are running here (every queue it was asked about
since it started; in a cluster, the partitions it owns). Gauges are read from storage when scraped,
through each queue's own logical queue, so they are exact rather than sampled; counters are the engine's
``ItemCounters`` and ``ClusterCounters``. Labels are the queue name, the route, a status code, a member
state and a hand-off reason: all bounded by what the operator creates or the code names, never by item
ids or clients.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from querator._tasks import Supervised
from querator.clock import Clock, seconds
from querator.cluster.lease_wait import LeaseCounters
from querator.cluster.node import ClusterNode
from querator.cluster.proxy import CLIENT_GONE, NO_REPLY
from querator.engine.hand_off_log import Direction
from querator.engine.logical_queue import ItemCounters
from querator.engine.queue import Queue
from querator.engine.queues_manager import ClusterCounters, HandOff, QueuesManager
from querator.errors import QueratorError, RetryRequest
from querator.storage.base import CountsRuns, PartitionTx, RunCounters

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
"""Seconds; up to 15 minutes because a lease long-polls up to its request_timeout."""
MEMBER_STATES = ("serving", "grace", "joining")
"""The states of ``ClusterNode.members``, each exported even when no member is in it."""

Ready = Callable[[], Awaitable[str]]
"""Why the node should not get traffic now ("" when ready): what ``/ready`` answers."""
Tasks = Callable[[], Iterable[Supervised]]
"""The node's long-lived background tasks."""


@dataclass(slots=True)
class QueueGauges:
    """One queue's state, summed over the partitions this node runs."""

    queued: int = 0
    leased: int = 0
    scheduled: int = 0
    oldest_created_at: int = 0
    failing_partitions: int = 0


class Metrics:
    """The node's private registry (no global state, so tests can run many servers in one process)."""

    def __init__(
        self,
        clock: Clock,
        cluster: ClusterNode,
        manager: QueuesManager,
        ready: Ready,
        tasks: Tasks = tuple,
        leases: LeaseCounters | None = None,
    ) -> None:
        """``leases``: what this member's waiting leases asked of the other owners."""
        self.registry = CollectorRegistry()
        self.latency = LightHistogram(
            "querator_request_duration_seconds",
            "Time to answer an API request, by route and status code (499: the client went away).",
            ("route", "code"),
            self.registry,
        )
        self._forwards = Counter(
            "querator_cluster_forwards",
            "Requests this node forwarded to the node owning what they need, by route and the owner's "
            f"status code ({NO_REPLY}: no authentic reply came; {CLIENT_GONE}: the client went away first).",
            ["route", "code"],
            registry=self.registry,
        )
        self._forward_latency = LightHistogram(
            "querator_cluster_forward_duration_seconds",
            "Time from forwarding a request to the owner's reply (or the failure), by route.",
            ("route",),
            self.registry,
        )
        ProcessCollector(registry=self.registry)
        self._queues = _QueueCollector(clock)
        self.registry.register(self._queues)
        self._node = _NodeCollector(cluster, manager.counters, tasks, leases or LeaseCounters())
        self.registry.register(self._node)
        if isinstance(manager.store, CountsRuns):
            self.registry.register(_RunCollector(manager.store.run_counters))
        self._manager = manager
        self._ready = ready
        self._lock = asyncio.Lock()

    def forwarded(self, route: str, code: str, seconds: float) -> None:
        """Counts one forward to another node (a ``Proxy``'s ``Forwarded``)."""
        self._forwards.labels(route, code).inc()
        self._forward_latency.labels(route).observe(seconds)

    async def render(self, accept: str) -> tuple[bytes, str]:
        """The exposition, with the gauges read now, and its content type: OpenMetrics when ``accept``
        asks for it (as Prometheus does), else the Prometheus text format."""
        encode, content_type = choose_encoder(accept)
        async with self._lock:  # one scrape at a time reads storage; the next reuses nothing stale
            queues = self._manager.running()
            snapshot = []
            for q in queues:
                gauges = await _gauges(q)
                if gauges is not None:
                    snapshot.append((q.name, gauges, q.logical.counters))
            self._queues.snapshot = snapshot
            self._node.ready = not await self._ready()
            self._node.partitions_owned = sum(len(q.owned) for q in queues)
            try:
                return encode(self.registry), content_type
            finally:
                self._queues.snapshot = []


class Observer:
    """One series of a ``LightHistogram``: counts per bucket and the sum."""

    __slots__ = ("counts", "total_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # the last: above every bucket (+Inf only)
        self.total_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total_s += seconds


class LightHistogram(Collector):
    """A latency histogram over ``LATENCY_BUCKETS`` by label values, exported as prometheus_client's
    ``Histogram`` would be (without its ``_created`` samples).

    Every request observes one: prometheus_client's takes a lock and updates an object per bucket, about
    2 us a request; this adds to one list entry (docs/benchmarks-log.md, "Small requests"). Observed and
    collected on the event loop only.
    """

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...], registry: CollectorRegistry):
        self._name = name
        self._documentation = documentation
        self._labels = labels
        self._series: dict[tuple[str, ...], Observer] = {}
        registry.register(self)

    def labels(self, *values: str) -> Observer:
        """The series of these label values, made on first use."""
        series = self._series.get(values)
        if series is None:
            series = self._series[values] = Observer()
        return series

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labels)
        bounds = [*map(floatToGoString, LATENCY_BUCKETS), "+Inf"]
        for values, series in sorted(self._series.items()):
            family.add_metric(
                values, list(zip(bounds, itertools.accumulate(series.counts), strict=True)), series.total_s
            )
        yield family


async def _gauges(queue: Queue) -> QueueGauges | None:
    """The queue's gauges; None when it is stopping (deleted, respawned, shutting down) meanwhile."""
    gauges = QueueGauges()

    def read(tx: PartitionTx) -> tuple[int, int, int, int]:
        stats = tx.stats(0)
        head = tx.head(1)
        return stats.total - stats.leased, stats.leased, stats.scheduled, head[0].created_at if head else 0

    for number, state in sorted(queue.logical.partitions.items()):
        if state.failures:
            gauges.failing_partitions += 1
            continue
        try:
            queued, leased, scheduled, oldest = await queue.logical.run_on(number, read, limited=False)
        except RetryRequest:  # failed just now, or given to another node
            gauges.failing_partitions += number in queue.logical.partitions
            continue
        except QueratorError:
            return None
        gauges.queued += queued
        gauges.leased += leased
        gauges.scheduled += scheduled
        if oldest and (not gauges.oldest_created_at or oldest < gauges.oldest_created_at):
            gauges.oldest_created_at = oldest
    return gauges


class _QueueCollector(Collector):
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.snapshot: list[tuple[str, QueueGauges, ItemCounters]] = []

    def collect(self) -> Iterator[Metric]:
        now = self._clock.now()
        gauges = {
            "queued": GaugeMetricFamily(
                "querator_items_queued", "Items waiting to be leased.", labels=["queue"]
            ),
            "leased": GaugeMetricFamily(
                "querator_items_leased", "Items leased and not yet done.", labels=["queue"]
            ),
            "scheduled": GaugeMetricFamily(
                "querator_items_scheduled", "Items waiting for their enqueue_at.", labels=["queue"]
            ),
            "age": GaugeMetricFamily(
                "querator_oldest_item_age_seconds",
                "Age of the oldest queued item (0: none).",
                labels=["queue"],
            ),
            "failing": GaugeMetricFamily(
                "querator_partitions_failing", "Partitions whose storage is failing.", labels=["queue"]
            ),
        }
        counters = {
            name: CounterMetricFamily(f"querator_items_{name}", text, labels=["queue"])
            for name, text in (
                ("produced", "Items stored by produce (de-duplicated items are not)."),
                ("delivered", "Items handed to consumers by leases."),
                ("completed", "Items completed."),
                ("retried", "Items given back by retry (now, later or dead)."),
                ("lease_expired", "Expired leases whose items went back to the queue."),
                ("released", "Leased items given back at once: their lease never reached its consumer."),
                ("dead_lettered", "Items that died: moved to the dead queue, or dropped without one."),
            )
        }
        runs = {
            "runs": CounterMetricFamily(
                "querator_batch_runs",
                "Storage runs of request batches: one per partition a batch touches.",
                labels=["queue"],
            ),
            "requests": CounterMetricFamily(
                "querator_batch_run_requests",
                "Requests those runs answered; divided by the runs, the requests merged into one run.",
                labels=["queue"],
            ),
            "seconds": CounterMetricFamily(
                "querator_batch_run_seconds", "Time those runs took, summed.", labels=["queue"]
            ),
        }
        for name, g, c in self.snapshot:
            labels = [name]
            gauges["queued"].add_metric(labels, g.queued)
            gauges["leased"].add_metric(labels, g.leased)
            gauges["scheduled"].add_metric(labels, g.scheduled)
            age = seconds(now - g.oldest_created_at) if g.oldest_created_at else 0.0
            gauges["age"].add_metric(labels, max(age, 0.0))
            gauges["failing"].add_metric(labels, g.failing_partitions)
            counters["produced"].add_metric(labels, c.produced)
            counters["delivered"].add_metric(labels, c.leased)
            counters["completed"].add_metric(labels, c.completed)
            counters["retried"].add_metric(labels, c.retried)
            counters["lease_expired"].add_metric(labels, c.lease_expired)
            counters["released"].add_metric(labels, c.released)
            counters["dead_lettered"].add_metric(labels, c.dead)
            runs["runs"].add_metric(labels, c.batch_runs)
            runs["requests"].add_metric(labels, c.batch_run_requests)
            runs["seconds"].add_metric(labels, c.batch_run_s)
        yield from gauges.values()
        yield from counters.values()
        yield from runs.values()


class _RunCollector(Collector):
    """What the store's partition runs cost (a store that counts it: ``CountsRuns``)."""

    def __init__(self, counters: RunCounters) -> None:
        self._counters = counters

    def collect(self) -> Iterator[Metric]:
        c = self._counters
        yield CounterMetricFamily(
            "querator_storage_runs", "Partition runs of the store, whatever asked.", c.runs
        )
        statements = CounterMetricFamily(
            "querator_storage_statements",
            "Statements the store sent, by kind: paxos (conditional writes and serial reads) or plain.",
            labels=["kind"],
        )
        statements.add_metric(["paxos"], c.paxos)
        statements.add_metric(["plain"], c.plain)
        yield statements
        yield CounterMetricFamily(
            "querator_storage_fence_reads",
            "Of the plain statements, the reads of owner epochs that acknowledge plain commits.",
            c.fence_reads,
        )
        phases = CounterMetricFamily(
            "querator_storage_run_phase_seconds",
            "Where partition runs spent their time, by phase: lock (waiting for the partition's previous "
            "run), thread (queued for and on a worker thread), then each kind of write sent (items, "
            "commit, roll...).",
            labels=["phase"],
        )
        for phase, spent_s in sorted(c.seconds.items()):
            phases.add_metric([phase], spent_s)
        yield phases


class _NodeCollector(Collector):
    """The node's readiness and its place in the cluster (a node alone: a one-member ring owning every
    partition)."""

    def __init__(
        self, cluster: ClusterNode, counters: ClusterCounters, tasks: Tasks, leases: LeaseCounters
    ) -> None:
        self._cluster = cluster
        self._counters = counters
        self._leases = leases
        self._tasks = tasks
        self.ready = False
        self.partitions_owned = 0

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "querator_ready", "1 when the node is ready for traffic (what /ready says), else 0.", self.ready
        )
        members = GaugeMetricFamily(
            "querator_cluster_members",
            "Members of the ring as this node sees them, by state: serving, grace (vanished, still "
            "owning its partitions until its grace period ends), joining (this node, its lease uncertain).",
            labels=["state"],
        )
        states = Tally(member.state for member in self._cluster.members())
        for state in MEMBER_STATES:
            members.add_metric([state], states[state])
        yield members
        yield GaugeMetricFamily(
            "querator_cluster_partitions_owned",
            "Partitions this node serves now: the ring's share of each queue whose engine runs here "
            "(an engine starts with the queue's first request on this node).",
            self.partitions_owned,
        )
        hand_offs = CounterMetricFamily(
            "querator_cluster_hand_offs",
            "Queues handed off: ring (the ring moved some of their partitions: only those changed hands), "
            "lease (this node's cluster lease was uncertain: its engines stopped), fenced (storage refused "
            "a write: another node claimed the partition, given up alone).",
            labels=["reason"],
        )
        for reason in HandOff:
            hand_offs.add_metric([reason.value], self._counters.hand_offs[reason])
        yield hand_offs
        moved = CounterMetricFamily(
            "querator_cluster_partitions_moved",
            "Partitions of running queues this node stopped serving (given) or was given (taken) by a "
            "hand-off, as listed by cluster.info.",
            labels=["direction"],
        )
        for direction in Direction:
            moved.add_metric([direction.value], self._counters.partitions_moved[direction])
        yield moved
        yield CounterMetricFamily(
            "querator_cluster_partition_claims",
            "Partitions claimed in storage before this node served them (a Paxos round each on Cassandra).",
            self._counters.partition_claims,
        )
        yield CounterMetricFamily(
            "querator_cluster_ring_changes",
            "Rings this node adopted since it started: member events arriving together count once.",
            self._cluster.ring_changes,
        )
        yield CounterMetricFamily(
            "querator_cluster_fenced_writes",
            "Writes storage refused because another node claimed the partition (a newer owner's epoch).",
            self._counters.fenced_writes,
        )
        leases = self._leases
        yield CounterMetricFamily(
            "querator_cluster_lease_probes",
            "Leases waiting here that asked another owner for the items it said it had (not waiting there).",
            leases.probes,
        )
        yield CounterMetricFamily(
            "querator_cluster_lease_watches",
            "Watches sent to other owners for the leases waiting here (one per queue and owner, renewed).",
            leases.watches,
        )
        yield CounterMetricFamily(
            "querator_cluster_lease_notifications",
            "Watches another owner answered because items arrived there.",
            leases.notifications,
        )
        restarts = CounterMetricFamily(
            "querator_task_restarts",
            "Long-lived background tasks started again after an unexpected failure, by task.",
            labels=["task"],
        )
        for task in self._tasks():
            restarts.add_metric([task.name], task.restarts)
        yield restarts
