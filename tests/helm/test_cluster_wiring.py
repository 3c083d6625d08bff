"""The chart's wiring works, not only its YAML: three real ``querator serve`` processes get exactly the
environment the chart renders for pods ``q-querator-0..2`` and form one cluster on a real etcd.

Kubernetes is replaced by the least that loopback needs, and nothing more: the kubelet's env resolution
(``fieldRef`` and ``$(VAR)`` expansion, ``pod_env``) stays as is; each pod's container ports and its DNS
name through the headless Service map onto its own ``127.0.0.1`` ports. The nodes share one Cassandra
keyspace (the chart's default store) or, with ``storage.backend=postgres``, one PostgreSQL schema, the URL
and user given as the Secret the chart names would. Then the probes the chart declares answer, the
``helm test`` script passes against a node, and a rolling restart of one pod (SIGTERM, as after preStop,
then the same env again) moves no partition.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from querator.client import Client
from querator.storage.postgres import PostgresSettings
from querator.wire import messages as m
from tests.cassandra_node import CassandraNode
from tests.integration.conftest import ServerProcess, Servers, free_port, server_env, wait_until
from tests.integration.etcd_server import EtcdServer

from .chart import CHART, NAMESPACE, Obj, Rendered, container_port, pod_env, render

pytestmark = pytest.mark.integration

NODES = 3
DEADLINE = 30.0
PARTITIONS = 16
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


@dataclass(frozen=True)
class Pod:
    """One pod of the StatefulSet as a loopback process: its name and where its ports landed."""

    name: str
    dns_name: str
    ports: dict[int, int]
    """Container port -> the loopback port standing in for it."""
    env: dict[str, str]
    """The chart's environment for this pod, network moved to loopback."""
    api_port: int


def local_pod(
    r: Rendered,
    ordinal: int,
    cluster_domain: str = "cluster.local",
    secrets: Mapping[tuple[str, str], str] | None = None,
) -> Pod:
    """Pod ``ordinal``'s environment as the chart renders it, with its network moved to loopback;
    ``secrets`` answers its Secret references (name, key)."""
    sts, container = r.statefulset, r.container
    name = f"{sts['metadata']['name']}-{ordinal}"
    dns_name = f"{name}.{sts['spec']['serviceName']}.{NAMESPACE}.svc.{cluster_domain}"
    ports = {int(p["containerPort"]): free_port() for p in container["ports"]}
    env = pod_env(container, {"metadata.name": name}, secrets or {})

    def to_loopback(address: str, expected_host: str) -> str:
        host, _, port = address.rpartition(":")
        assert host == expected_host, f"{address}: expected host {expected_host}"
        return f"127.0.0.1:{ports[int(port)]}"

    # Listening on every interface becomes listening on loopback; the pod's DNS name becomes loopback.
    env["QUERATOR_ADDRESS"] = to_loopback(env["QUERATOR_ADDRESS"], "0.0.0.0")
    env["QUERATOR_ADMIN_ADDRESS"] = to_loopback(env["QUERATOR_ADMIN_ADDRESS"], "0.0.0.0")
    env["QUERATOR_ADVERTISE_ADDRESS"] = to_loopback(env["QUERATOR_ADVERTISE_ADDRESS"], dns_name)
    return Pod(name, dns_name, ports, env, ports[container_port(container, "http")])


def start(servers: Servers, pod: Pod, tmp_path: Path) -> ServerProcess:
    # Only the chart's variables: server_env drops any QUERATOR_* of this process.
    return servers.spawn(env=pod.env, cwd=tmp_path / pod.name, port=pod.api_port)


def probe_ok(container: Obj, pod: Pod, probe: str) -> bool:
    """True when the pod's ``probe`` (an httpGet on a named port) answers 2xx, as the kubelet checks."""
    get = container[probe]["httpGet"]
    port = pod.ports[container_port(container, get["port"])]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{get['path']}", timeout=2) as resp:
            return 200 <= int(resp.status) < 300
    except OSError:  # refused, reset, or a 503 (HTTPError)
        return False


def pass_probes(container: Obj, nodes: list[ServerProcess], pods: list[Pod]) -> None:
    """Waits until every probe the chart declares passes on every pod (each node still running)."""
    for node, pod in zip(nodes, pods, strict=True):
        wait_until(
            lambda n=node, p=pod: all(probe_ok(container, p, probe) for probe in PROBES) or not n.running(),
            DEADLINE,
            f"{pod.name} passes its probes",
        )
        assert node.running(), node.describe()


def info(server: ServerProcess, queue: str = "") -> m.ClusterInfoResponse:
    with Client(server.url) as client:
        return client.cluster_info(queue)


def members(server: ServerProcess) -> list[tuple[str, str, str]]:
    return [(mm.node_id, mm.address, mm.state) for mm in info(server).members]


def owners(server: ServerProcess, queue: str) -> dict[int, str]:
    return {p.partition: p.owner for p in info(server, queue).partitions}


def test_three_pods_with_the_chart_s_env_form_one_cluster(
    helm: str, servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, tmp_path: Path
) -> None:
    prefix = "/helm-" + secrets.token_hex(4)
    r = render(
        helm,
        sets={
            "replicaCount": str(NODES),
            "cluster.etcd.endpoints[0]": f"127.0.0.1:{etcd.client_port}",
            "cluster.etcd.prefix": prefix,
            # The pods share one Cassandra, as the chart's default storage does.
            "storage.cassandra.hosts[0]": "127.0.0.1",
            "storage.cassandra.port": str(cassandra_node.cql_port),
            "storage.cassandra.keyspace": "helm_" + secrets.token_hex(4),
        },
    )
    assert r.statefulset["spec"]["replicas"] == NODES
    container = r.container
    pods = [local_pod(r, n) for n in range(NODES)]
    assert pods[0].env["QUERATOR_NODE_ID"] == "q-querator-0"
    assert pods[0].env["QUERATOR_CLUSTER"] == f"etcd://127.0.0.1:{etcd.client_port}{prefix}"
    for pod in pods:
        (tmp_path / pod.name).mkdir()
    nodes = [start(servers, pod, tmp_path) for pod in pods]  # podManagementPolicy: Parallel

    # The kubelet's view: every probe the chart declares passes on every pod.
    pass_probes(container, nodes, pods)

    # One cluster: each node sees the three pods by name, at their advertised addresses.
    expected = [(pod.name, f"127.0.0.1:{pod.api_port}", "serving") for pod in pods]
    wait_until(lambda: all(members(n) == expected for n in nodes), DEADLINE, "every node sees 3 members")
    for node, pod in zip(nodes, pods, strict=True):
        assert info(node).node_id == pod.name
    with Client(nodes[0].url) as client:
        client.create_queue("jobs", partitions=PARTITIONS)
    before = [owners(n, "jobs") for n in nodes]
    assert before[0] == before[1] == before[2]
    assert set(before[0].values()) == {pod.name for pod in pods}

    # The helm test pod's script, with the test pod's env, against each node standing in for the Service:
    # whichever pod the Service picks forwards what it does not own.
    test_env = pod_env(r.test_pod["spec"]["containers"][0], {}, {})
    service = r.client_service
    assert test_env["QUERATOR_ENDPOINT"].endswith(f":{service['spec']['ports'][0]['port']}")
    for node in nodes:
        test_env["QUERATOR_ENDPOINT"] = node.url
        smoke = subprocess.run(
            [sys.executable, "-c", (CHART / "files" / "helm-test.py").read_text()],
            env=server_env(test_env),
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )
        assert smoke.returncode == 0, smoke.stderr
        assert smoke.stdout.startswith("ok:")

    # A rolling restart of pod 1: SIGTERM (after preStop) leaves at once, well within the grace the
    # chart gives; the others keep its partitions (grace period) and it comes back under its name.
    pod_spec = r.statefulset["spec"]["template"]["spec"]
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    budget = pod_spec["terminationGracePeriodSeconds"] - pre_stop
    began = time.monotonic()
    nodes[1].proc.send_signal(signal.SIGTERM)
    assert nodes[1].wait(budget) == 0, nodes[1].describe()
    assert time.monotonic() - began < budget
    others = [nodes[0], nodes[2]]
    wait_until(
        lambda: all(("q-querator-1", "grace") in [(n, s) for n, _, s in members(o)] for o in others),
        DEADLINE,
        "the others hold q-querator-1's partitions for the grace period",
    )
    assert all(owners(o, "jobs") == before[0] for o in others)
    back = start(servers, pods[1], tmp_path)
    wait_until(lambda: all(members(n) == expected for n in others), DEADLINE, "q-querator-1 is back")
    wait_until(lambda: probe_ok(container, pods[1], "readinessProbe"), DEADLINE, "q-querator-1 is ready")
    assert [owners(n, "jobs") for n in (nodes[0], back, nodes[2])] == [before[0]] * 3


@pytest.mark.postgres
def test_pods_with_the_chart_s_postgres_env_share_its_schema(
    helm: str, servers: Servers, etcd: EtcdServer, postgres_settings: PostgresSettings, tmp_path: Path
) -> None:
    """storage.backend postgres: two pods that get the URL and the user from the Secret the chart names
    form one cluster on the schema the chart sets, and an item produced through one is leased through the
    other."""
    url = psycopg.conninfo.conninfo_to_dict(postgres_settings.url)
    r = render(
        helm,
        sets={
            "replicaCount": "2",
            "cluster.etcd.endpoints[0]": f"127.0.0.1:{etcd.client_port}",
            "cluster.etcd.prefix": "/helm-" + secrets.token_hex(4),
            "storage.backend": "postgres",
            "storage.postgres.existingSecret": "pg",
            "storage.postgres.usernameKey": "user",
            "storage.postgres.schema": postgres_settings.schema,
        },
    )
    # The user comes from its own key: the URL in the Secret names none.
    in_secret = {
        ("pg", "url"): f"postgresql://{url['host']}:{url['port']}/{url['dbname']}",
        ("pg", "user"): url["user"],
    }
    pods = [local_pod(r, n, secrets=in_secret) for n in range(2)]
    for pod in pods:
        (tmp_path / pod.name).mkdir()
    nodes = [start(servers, pod, tmp_path) for pod in pods]
    pass_probes(r.container, nodes, pods)
    expected = [(pod.name, f"127.0.0.1:{pod.api_port}", "serving") for pod in pods]
    wait_until(lambda: all(members(n) == expected for n in nodes), DEADLINE, "every node sees 2 members")
    with Client(nodes[0].url) as client:
        client.create_queue("jobs", partitions=1)
        client.produce("jobs", ["one"])
    with Client(nodes[1].url) as client:
        [item] = client.lease("jobs", batch_size=1).items
    assert item.bytes == b"one"
    with psycopg.connect(postgres_settings.url) as conn:
        query = (
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = 'items'"
        )
        row = conn.execute(query, (postgres_settings.schema,)).fetchone()
    assert row == (1,)
