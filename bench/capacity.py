"""How many Querator nodes and Cassandra nodes a load needs: the capacity model of docs/capacity.md.

    python bench/capacity.py                                   # 1 billion items a day, both batch sizes
    python bench/capacity.py --items-per-day 2e8 --peak 3 --node-cores 4 --cassandra-cores 16

An item is produced, leased and completed once (the benchmarks' cycle). The inputs default to the
figures measured on the project's 2-core VM (docs/benchmarks-log.md; docs/capacity.md says which) and can be
replaced by a deployment's own; the arithmetic is CPU only: cores = items/s at peak x CPU per item /
target utilisation, with Cassandra's CPU per item multiplied by the replication factor.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class Costs:
    """What one item of the cycle costs at one batch size (measured, docs/capacity.md)."""

    batch: int
    node_us: float
    """Querator node CPU per item (produce + lease + complete), microseconds."""
    cassandra_us: float
    """Cassandra CPU per item on one replica (a single node, RF 1), microseconds."""
    partition_items_per_s: float
    """Items per second one partition serves: its storage runs are serial (docs/architecture.md)."""


MEASURED = (
    # Batch 1: node 750 us (issue 38 table, 718-797 on Cassandra); Cassandra 1.07 Paxos rounds x 741 us
    # + 0.73 plain statements x ~150 us = ~900 us (periodic commit log); ~50 items/s per partition.
    Costs(batch=1, node_us=750.0, cassandra_us=900.0, partition_items_per_s=50.0),
    # Batch 100: node 28 us, Cassandra 35 us (2026-11-25, periodic); ~2,500 items/s per partition.
    Costs(batch=100, node_us=28.0, cassandra_us=35.0, partition_items_per_s=2_500.0),
)


FORWARD_COST = 1.8
"""A forwarded request's extra CPU, in requests' CPU at the owner: the forwarding member receives it and
sends it on (bench/scale.py: 1.3-2.2, mean 1.8; docs/benchmarks-log.md "Members as the cluster grows")."""


@dataclass(frozen=True)
class Plan:
    peak_items_per_s: float
    node_cores: float
    nodes: int
    cassandra_cores: float
    cassandra_nodes: int
    partitions: int


def plan(
    costs: Costs,
    items_per_day: float,
    peak: float = 2.0,
    utilisation: float = 0.6,
    node_cores: int = 8,
    cassandra_cores: int = 8,
    rf: int = 3,
    forwarded: float = 0.0,
    min_nodes: int = 3,
    forward_cost: float = FORWARD_COST,
) -> Plan:
    """The nodes ``items_per_day`` needs at ``costs``: ``peak`` is the peak-to-average ratio of the
    rate, ``utilisation`` the CPU share a node may use at peak, ``forwarded`` the fraction of requests a
    node forwards to the owner (0 with owner-aware clients), each costing ``forward_cost`` requests'
    CPU more. At least ``min_nodes`` Querator nodes and ``rf`` Cassandra
    nodes, for availability."""
    rate = items_per_day / SECONDS_PER_DAY * peak
    querator = rate * costs.node_us * (1 + forwarded * forward_cost) / 1e6 / utilisation
    cassandra = rate * costs.cassandra_us * rf / 1e6 / utilisation
    return Plan(
        peak_items_per_s=rate,
        node_cores=querator,
        nodes=max(min_nodes, math.ceil(querator / node_cores)),
        cassandra_cores=cassandra,
        cassandra_nodes=max(rf, math.ceil(cassandra / cassandra_cores)),
        partitions=math.ceil(rate / costs.partition_items_per_s),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items-per-day", type=float, default=1e9)
    parser.add_argument("--peak", type=float, default=2.0, help="peak rate over the day's average")
    parser.add_argument("--utilisation", type=float, default=0.6, help="CPU share used at peak")
    parser.add_argument("--node-cores", type=int, default=8, help="cores (serve --processes) per node")
    parser.add_argument("--cassandra-cores", type=int, default=8, help="cores per Cassandra node")
    parser.add_argument("--rf", type=int, default=3, help="Cassandra replication factor")
    parser.add_argument("--forwarded", type=float, default=0.0, help="fraction of requests forwarded")
    parser.add_argument(
        "--forward-cost", type=float, default=FORWARD_COST, help="a forward's CPU, in requests' CPU"
    )
    parser.add_argument("--node-us", type=float, nargs=2, metavar=("B1", "B100"), help="node CPU us/item")
    parser.add_argument("--cassandra-us", type=float, nargs=2, metavar=("B1", "B100"), help="per replica")
    args = parser.parse_args()
    print(
        f"{args.items_per_day:,.0f} items/day, peak {args.peak}x the average, {args.utilisation:.0%} CPU at "
        f"peak, {args.node_cores}-core Querator nodes, {args.cassandra_cores}-core Cassandra nodes, RF "
        f"{args.rf}, {args.forwarded:.0%} of requests forwarded\n"
        "| batch | peak items/s | node us/item | Cassandra us/item/replica | Querator cores | Querator nodes "
        "| Cassandra cores | Cassandra nodes | partitions |\n|---|---|---|---|---|---|---|---|---|"
    )
    for n, measured in enumerate(MEASURED):
        costs = Costs(
            measured.batch,
            args.node_us[n] if args.node_us else measured.node_us,
            args.cassandra_us[n] if args.cassandra_us else measured.cassandra_us,
            measured.partition_items_per_s,
        )
        p = plan(
            costs,
            args.items_per_day,
            peak=args.peak,
            utilisation=args.utilisation,
            node_cores=args.node_cores,
            cassandra_cores=args.cassandra_cores,
            rf=args.rf,
            forwarded=args.forwarded,
            forward_cost=args.forward_cost,
        )
        cores = f"{p.node_cores:.1f} | {p.nodes} | {p.cassandra_cores:.1f} | {p.cassandra_nodes}"
        print(
            f"| {costs.batch} | {p.peak_items_per_s:,.0f} | {costs.node_us:.0f} | {costs.cassandra_us:.0f} "
            f"| {cores} | {p.partitions} |"
        )


if __name__ == "__main__":
    main()
