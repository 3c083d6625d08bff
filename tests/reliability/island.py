"""A network namespace for one node, so that the tests can cut it off from the others.

The machine has no iptables and its kernel has no traffic-control qdiscs, but it has network namespaces
and veth pairs (root, or CAP_NET_ADMIN). The island is a namespace joined to the host by one veth pair:

    host side  10.77.0.1  the other nodes and etcd, as the island sees them
               10.77.0.3  Cassandra, as the island sees it (a second address on the same link)
    island     10.77.0.2  the node inside

etcd and the test Cassandra listen on every address, so the island reaches them through the link. A
partition is a blackhole route inside the island: packets the island sends to a cut address are dropped
(its own connection attempts fail at once, with EINVAL; its replies to the host's connections are lost,
so the host's requests to it time out). Routes to 10.77.0.1 cut the island from etcd, from its peers and
from the clients (whose connections come from 10.77.0.1); routes to 10.77.0.3 cut it from Cassandra.
``heal`` removes them. Tests that need the island skip when the namespace cannot be made.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

NAMESPACE = "querator-island"
HOST_LINK, ISLAND_LINK = "qisland-h", "qisland-n"
PEERS = "10.77.0.1"
"""The host as the island reaches etcd and the other nodes (and as their connections come from)."""
STORAGE = "10.77.0.3"
"""The host as the island reaches Cassandra."""
ISLAND = "10.77.0.2"


def _ip(*args: str, namespace: bool = False) -> None:
    command = ["ip", "netns", "exec", NAMESPACE, "ip", *args] if namespace else ["ip", *args]
    subprocess.run(command, check=True, capture_output=True, text=True)


class Island:
    """The namespace, made on construction; ``remove`` undoes it (and any partition with it)."""

    prefix = ("ip", "netns", "exec", NAMESPACE)
    """The command that runs a process inside the island."""

    def __init__(self) -> None:
        self.remove()  # a previous run killed before its teardown
        _ip("netns", "add", NAMESPACE)
        _ip("link", "add", HOST_LINK, "type", "veth", "peer", "name", ISLAND_LINK)
        _ip("link", "set", ISLAND_LINK, "netns", NAMESPACE)
        for address in (PEERS, STORAGE):
            _ip("addr", "add", f"{address}/24", "dev", HOST_LINK)
        _ip("link", "set", HOST_LINK, "up")
        _ip("addr", "add", f"{ISLAND}/24", "dev", ISLAND_LINK, namespace=True)
        _ip("link", "set", ISLAND_LINK, "up", namespace=True)
        _ip("link", "set", "lo", "up", namespace=True)
        self.cut: list[str] = []

    def partition(self, *addresses: str) -> None:
        """Cuts the island off from ``addresses`` (``PEERS``, ``STORAGE``)."""
        for address in addresses:
            _ip("route", "add", "blackhole", f"{address}/32", namespace=True)
            self.cut.append(address)

    def heal(self) -> None:
        while self.cut:
            _ip("route", "del", "blackhole", f"{self.cut.pop()}/32", namespace=True)

    @staticmethod
    def remove() -> None:
        """Deletes the namespace and the host's end of the link, if they exist."""
        for command in (["ip", "netns", "del", NAMESPACE], ["ip", "link", "del", HOST_LINK]):
            subprocess.run(command, check=False, capture_output=True)  # absent is fine


@pytest.fixture
def island() -> Iterator[Island]:
    try:
        made = Island()
    except (OSError, subprocess.CalledProcessError) as e:
        detail = e.stderr.strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
        pytest.skip(f"cannot make a network namespace here (needs root or CAP_NET_ADMIN): {detail}")
    try:
        yield made
    finally:
        made.remove()
