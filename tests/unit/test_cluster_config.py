"""The cluster settings of ``querator serve``: parsed from flags, environment and YAML, refused clearly."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from querator.config import ClusterConfig, ConfigError, load


def cluster_config(flags: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> ClusterConfig:
    config = load(None, env or {}, flags or {}).cluster_config()
    assert config is not None
    return config


def test_no_cluster_is_a_single_node() -> None:
    config = load(None, {}, {})
    assert config.cluster_config() is None
    assert config.node_id == ""  # a single node never needs an id, whatever its host is called


def test_flags() -> None:
    config = cluster_config(
        {
            "cluster": "etcd://10.0.0.1:2379,etcd-2.example:2379/prod/querator/",
            "node_id": "querator-0",
            "advertise_address": "querator-0.querator:2319",
            "etcd_lease_ttl": "5s",
            "cluster_grace_period": "1m30s",
        }
    )
    assert config == ClusterConfig(
        endpoints=("http://10.0.0.1:2379", "http://etcd-2.example:2379"),
        prefix="/prod/querator",
        node_id="querator-0",
        advertise_address="querator-0.querator:2319",
        lease_ttl=5,
        grace_period=90.0,
    )


def test_environment_and_defaults() -> None:
    config = cluster_config(
        env={"QUERATOR_CLUSTER": "etcd://127.0.0.1:2379", "QUERATOR_ADDRESS": "10.1.2.3:9000"}
    )
    assert config.endpoints == ("http://127.0.0.1:2379",)
    assert config.prefix == "/querator"
    assert config.node_id == socket.gethostname()
    assert config.advertise_address == "10.1.2.3:9000"
    assert (config.lease_ttl, config.grace_period) == (10, 20.0)


def test_a_wildcard_address_advertises_the_host_name() -> None:
    config = cluster_config({"cluster": "etcd://127.0.0.1:2379", "address": "0.0.0.0:2319"})
    assert config.advertise_address == f"{socket.gethostname()}:2319"


def test_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "querator.yaml"
    path.write_text(
        "cluster: etcd://127.0.0.1:2379/q\nnode-id: n1\nadvertise-address: n1:2319\n"
        "etcd-lease-ttl: 3s\ncluster-grace-period: 0s\n"
    )
    config = load(str(path), {}, {}).cluster_config()
    assert config == ClusterConfig(("http://127.0.0.1:2379",), "/q", "n1", "n1:2319", 3, 0.0)


def test_flags_beat_environment() -> None:
    config = cluster_config(
        {"node_id": "from-flag"},
        {"QUERATOR_CLUSTER": "etcd://127.0.0.1:2379", "QUERATOR_NODE_ID": "from-env"},
    )
    assert config.node_id == "from-flag"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            {"cluster": "http://127.0.0.1:2379"},
            "cluster is invalid; 'http://127.0.0.1:2379' is not etcd://host:port[,host:port][/prefix]",
        ),
        (
            {"cluster": "etcd://127.0.0.1/q"},
            "cluster is invalid; '127.0.0.1' in 'etcd://127.0.0.1/q' is not host:port",
        ),
        (
            {"cluster": "etcd://127.0.0.1:2379,:2379"},
            "cluster is invalid; ':2379' in 'etcd://127.0.0.1:2379,:2379' is not host:port",
        ),
        ({"cluster": "etcd://a:70000"}, "cluster is invalid; 'a:70000'"),
        ({"cluster": "etcd://a:2379/x//y"}, "cluster is invalid; prefix '/x//y' of 'etcd://a:2379/x//y'"),
        ({"cluster": "etcd://a:2379", "node_id": "a/b"}, "node-id is invalid; 'a/b' must be 1 to 253"),
        ({"cluster": "etcd://a:2379", "node_id": "-x"}, "node-id is invalid; '-x'"),
        (
            {"cluster": "etcd://a:2379", "advertise_address": "nohost"},
            "advertise-address is invalid; 'nohost' is not host:port",
        ),
        ({"etcd_lease_ttl": "ten"}, 'etcd-lease-ttl is invalid; time: invalid duration "ten"'),
        (
            {"etcd_lease_ttl": "1s"},
            "etcd-lease-ttl is invalid; '1s' is not a whole number of seconds of at least 2s",
        ),
        ({"etcd_lease_ttl": "2500ms"}, "etcd-lease-ttl is invalid; '2500ms' is not a whole number"),
        ({"cluster_grace_period": "-1s"}, "cluster-grace-period is invalid; '-1s' is negative"),
        (
            {"cluster": "etcd://a:2379", "api_keys": "0" * 64},
            "cluster-secret-file is required with api keys or tenancy in a cluster",
        ),
        (
            {"cluster": "etcd://a:2379", "tenancy": "on"},
            "cluster-secret-file is required with api keys or tenancy in a cluster",
        ),
        ({"tenancy": "maybe"}, "tenancy is invalid; 'maybe' is not on or off"),
        (
            {"tls_cert_file": "c.pem"},
            "tls-key-file is invalid; tls-cert-file and tls-key-file are set together",
        ),
        (
            {"tls_key_file": "k.pem"},
            "tls-cert-file is invalid; tls-cert-file and tls-key-file are set together",
        ),
        (
            {"cluster_tls_cert_file": "c.pem", "tls_cert_file": "c", "tls_key_file": "k"},
            "cluster-tls-key-file",
        ),
        ({"tls_client_ca_file": "ca.pem"}, "tls-client-ca-file is invalid; it needs --tls-cert-file (HTTPS)"),
        ({"cluster_tls_ca_file": "ca.pem"}, "cluster-tls-ca-file is invalid; it needs --tls-cert-file"),
    ],
)
def test_invalid(flags: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load(None, {}, flags)
    assert str(refused.value).startswith(message), str(refused.value)
