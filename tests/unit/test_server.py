"""What ``querator.server`` derives from the settings: the Host names a node answers (DNS rebinding,
docs/configuration.md "Host names")."""

from __future__ import annotations

from querator.config import ServerConfig
from querator.processes import ProcessRole
from querator.server import _allowed_hosts

POD = "querator-0.querator-headless.jobs.svc.cluster.local"


def test_a_keyless_node_answers_its_own_names_and_the_allowed_ones() -> None:
    config = ServerConfig(
        address="0.0.0.0:2319",
        admin_address="admin.example:2320",
        advertise_address=f"{POD}:2319",  # the Host of what the other nodes forward to it
        allowed_hosts="queue.example.com, .corp.example",
    )
    hosts = _allowed_hosts(config, None)
    assert hosts is not None
    for host in (f"{POD}:2319", "admin.example:2320", "queue.example.com", "a.corp.example:2319"):
        assert hosts.allows(host), host
    assert not hosts.allows("evil.example")


def test_a_process_answers_the_names_it_is_forwarded_to_at() -> None:
    addresses = ("p0.example:7000", "p1.example:7001")
    role = ProcessRole(1, addresses, private_fd=-1, parent_fd=-1, secret=b"", shared_db="")
    hosts = _allowed_hosts(ServerConfig(), role)
    assert hosts is not None and hosts.allows("p1.example:7001") and hosts.allows("p0.example:7000")


def test_with_api_keys_no_host_is_checked() -> None:
    assert _allowed_hosts(ServerConfig(api_keys="a" * 64), None) is None
    assert _allowed_hosts(ServerConfig(api_keys_file="keys"), None) is None
