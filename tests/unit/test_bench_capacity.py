"""The capacity model's arithmetic (bench/capacity.py) gives docs/capacity.md's sizing of 1 billion items
a day."""

from __future__ import annotations

from bench.capacity import MEASURED, plan


def test_a_billion_items_a_day_at_batch_1_and_100() -> None:
    one, hundred = (plan(costs, 1e9) for costs in MEASURED)
    assert round(one.peak_items_per_s) == 23_148  # 1e9 / 86,400 s, twice the average at peak
    assert (round(one.node_cores, 1), one.nodes) == (28.9, 4)
    assert (round(one.cassandra_cores, 1), one.cassandra_nodes, one.partitions) == (104.2, 14, 463)
    assert (hundred.nodes, hundred.cassandra_nodes, hundred.partitions) == (3, 3, 10)


def test_forwarding_and_replication_scale_the_cores() -> None:
    base = plan(MEASURED[0], 1e9, rf=1)
    forwarded = plan(MEASURED[0], 1e9, rf=3, forwarded=0.5, forward_cost=2.0)
    assert round(forwarded.node_cores / base.node_cores, 6) == 2.0
    assert round(forwarded.cassandra_cores / base.cassandra_cores, 6) == 3.0
    assert plan(MEASURED[1], 1e6, rf=5).cassandra_nodes == 5  # never fewer nodes than replicas
