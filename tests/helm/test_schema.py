"""values.schema.json (and the chart's own checks) refuse values that would render a broken cluster:
``helm template`` fails naming the value, instead of rendering pods that crash or never form a cluster.
Values that the server accepts must still pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from querator.config import load

from .chart import pod_env, render, run_helm, template_args

pytestmark = pytest.mark.integration

REJECTED: list[tuple[str, dict[str, Any], str]] = [
    ("no-replicas", {"replicaCount": 0}, "replicaCount"),
    ("replicas-as-string", {"replicaCount": "3"}, "replicaCount"),
    ("misspelt-key", {"replicas": 3}, "replicas"),
    ("misspelt-nested-key", {"cluster": {"leaseTtl": "10s"}}, "leaseTtl"),
    ("sqlite-without-volumes", {"storage": {"backend": "sqlite"}}, "storage.backend"),
    ("serial-consistency", {"storage": {"cassandra": {"consistency": "SERIAL"}}}, "consistency"),
    (
        "bad-replication",
        {"storage": {"cassandra": {"replication": "NetworkTopologyStrategy"}}},
        "replication",
    ),
    ("bad-keyspace", {"storage": {"cassandra": {"keyspace": "my-queues"}}}, "keyspace"),
    ("no-etcd", {"cluster": {"etcd": {"endpoints": []}}}, "endpoints"),
    ("etcd-url", {"cluster": {"etcd": {"endpoints": ["http://etcd:2379"]}}}, "endpoints"),
    ("relative-prefix", {"cluster": {"etcd": {"prefix": "querator"}}}, "prefix"),
    ("short-lease", {"cluster": {"leaseTTL": "1s"}}, "leaseTTL"),
    ("fractional-lease", {"cluster": {"leaseTTL": "2.5s"}}, "leaseTTL"),
    ("grace-without-unit", {"cluster": {"gracePeriod": "20"}}, "gracePeriod"),
    ("port-out-of-range", {"querator": {"port": 70000}}, "port"),
    ("external-name-service", {"service": {"type": "ExternalName"}}, "service.type"),
    ("pull-policy", {"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ("log-level", {"querator": {"logLevel": "trace"}}, "logLevel"),
    (
        "both-budgets",
        {"podDisruptionBudget": {"maxUnavailable": 1, "minAvailable": 2}},
        "podDisruptionBudget",
    ),
    ("no-budget", {"podDisruptionBudget": {"maxUnavailable": ""}}, "podDisruptionBudget"),
    ("tls-without-ca", {"storage": {"cassandra": {"tls": {"enabled": True}}}}, "caSecret"),
    ("keys-without-test-key", {"apiKeys": {"existingSecret": "keys"}}, "tests.apiKey"),
    ("bad-secret-name", {"apiKeys": {"existingSecret": "Keys_1"}}, "existingSecret"),
    ("bad-anti-affinity", {"podAntiAffinity": "always"}, "podAntiAffinity"),
    ("postgres-url-in-values", {"storage": {"postgres": {"url": "postgresql://u:p@db/q"}}}, "url"),
    ("postgres-bad-schema", {"storage": {"postgres": {"schema": "Queues"}}}, "schema"),
    ("postgres-no-connections", {"storage": {"postgres": {"connections": 0}}}, "connections"),
    ("postgres-too-many-connections", {"storage": {"postgres": {"connections": 101}}}, "connections"),
    (
        "postgres-tls-without-ca",
        {"storage": {"postgres": {"existingSecret": "pg", "tls": {"enabled": True}}}},
        "storage.postgres.tls.caSecret",
    ),
    # Checked by the templates: these compare two values.
    (
        "grace-shorter-than-prestop",
        {"terminationGracePeriodSeconds": 5, "preStopSleepSeconds": 5},
        "terminationGracePeriodSeconds must be greater than preStopSleepSeconds",
    ),
    ("one-port-for-both", {"querator": {"adminPort": 2319}}, "must differ"),
    (
        "keys-without-cluster-secret",
        {"apiKeys": {"existingSecret": "keys"}, "tests": {"enabled": False}},
        "cluster.secret.existingSecret is required with apiKeys",
    ),
    (
        "tenancy-without-cluster-secret",
        {"tenancy": {"enabled": True}},
        "cluster.secret.existingSecret is required with tenancy",
    ),
    (
        "postgres-without-secret",
        {"storage": {"backend": "postgres"}},
        "storage.postgres.existingSecret is required with storage.backend postgres",
    ),
    ("tenancy-not-a-boolean", {"tenancy": {"enabled": "yes"}}, "enabled"),
    ("too-many-processes", {"querator": {"processes": 257}}, "processes"),
    (
        "processes-on-memory",
        {"querator": {"processes": 2}, "storage": {"backend": "memory"}},
        "querator.processes above 1 needs storage.backend cassandra or postgres",
    ),
    (
        "process-ports-past-65535",
        {"querator": {"processes": 2, "processPortBase": 65535}},
        "processPortBase + querator.processes - 1 must be a port up to 65535",
    ),
    (
        "api-port-among-process-ports",
        {"querator": {"processes": 2, "processPortBase": 2318}},
        "must lie outside the process ports",
    ),
]

ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    (
        "ipv6-etcd-and-nested-prefix",
        {"cluster": {"etcd": {"endpoints": ["[fd00::1]:2379"], "prefix": "/a/b"}}},
    ),
    ("memory-storage", {"storage": {"backend": "memory"}}),
    ("lease-in-seconds", {"cluster": {"leaseTTL": "30s", "gracePeriod": "1m30s"}}),
    ("budget-as-percentage", {"podDisruptionBudget": {"maxUnavailable": "", "minAvailable": "50%"}}),
    (
        "keys-without-tests",
        {
            "apiKeys": {"existingSecret": "keys"},
            "cluster": {"secret": {"existingSecret": "cluster"}},
            "tests": {"enabled": False},
        },
    ),
    (
        "network-topology",
        {"storage": {"cassandra": {"replication": "NetworkTopologyStrategy:dc1=3,dc-2=2"}}},
    ),
]


def write_values(tmp_path: Path, values: dict[str, Any]) -> Path:
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(values))
    return file


@pytest.mark.parametrize(("values", "message"), [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_bad_values_are_refused(helm: str, tmp_path: Path, values: dict[str, Any], message: str) -> None:
    done = run_helm(helm, *template_args([write_values(tmp_path, values)]))
    assert done.returncode != 0, f"rendered despite {values}"
    assert message in done.stderr


@pytest.mark.parametrize("values", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_good_values_render(helm: str, tmp_path: Path, values: dict[str, Any]) -> None:
    """What the schema lets through, the server accepts too."""
    container = render(helm, [write_values(tmp_path, values)]).container
    load(None, pod_env(container, {"metadata.name": "querator-0"}, {}), {})
