"""The Helm chart renders what a Querator cluster needs: ``helm lint --strict``, every document of the
values matrix valid for Kubernetes 1.29 to 1.33 (kubernetes-validate, strict), and the wiring that the
schemas cannot check (node ids, advertise addresses, probes, selectors, Secrets) asserted object by
object. The real node processes behind that wiring are in ``test_cluster_wiring.py``."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from cassandra import ConsistencyLevel

from querator.config import ServerConfig, load
from querator.http import AllowedHosts

from .chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    ROOT,
    Rendered,
    container_port,
    env_vars,
    labels_match,
    pod_env,
    render,
    run_helm,
    template_args,
)
from .conftest import CASE_IDS, CASES, Case, ci_file

pytestmark = pytest.mark.integration

KUBERNETES_VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33")
CUSTOM_API_GROUPS = ("monitoring.coreos.com/",)
"""CRDs kubernetes-validate has no schema for; their objects are asserted by hand below."""
STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)
Render = Callable[[str], Rendered]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_lint_strict(helm: str, case: Case) -> None:
    args = ["lint", "--strict", str(CHART)]
    for file in case.values:
        args += ["--values", str(file)]
    done = run_helm(helm, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_every_document_is_valid_kubernetes(
    rendered: Render, kubernetes_validate: ModuleType, case: Case
) -> None:
    objects = rendered(case.name).objects
    assert objects
    for obj in objects:
        custom = obj["apiVersion"].startswith(CUSTOM_API_GROUPS)
        for version in KUBERNETES_VERSIONS:
            where = f"{obj['kind']} {obj['metadata']['name']} on Kubernetes {version}"
            if custom:
                with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                    kubernetes_validate.validate(obj, version, strict=True)
                continue
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{where}: {e.message} at {list(e.path)}")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_labels_and_selectors_match(rendered: Render, case: Case) -> None:
    r = rendered(case.name)
    sts = r.statefulset
    selector = sts["spec"]["selector"]["matchLabels"]
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert labels_match(selector, pod_labels)
    for service in r.all("Service"):
        assert service["spec"]["selector"] == selector, service["metadata"]["name"]
    for pdb in r.all("PodDisruptionBudget"):
        assert pdb["spec"]["selector"]["matchLabels"] == selector
    for obj in r.objects:
        labels = obj["metadata"]["labels"]
        assert all(labels.get(k) for k in STANDARD_LABELS), obj["metadata"]["name"]
        assert labels["app.kubernetes.io/instance"] == RELEASE
    # The test pod shares name and instance but must never be behind a Service or in the budget.
    assert not labels_match(selector, r.test_pod["metadata"]["labels"])


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_node_id_and_advertise_address_come_from_the_pod(rendered: Render, case: Case) -> None:
    r = rendered(case.name)
    sts, container, headless = r.statefulset, r.container, r.headless_service
    env = env_vars(container)
    assert env["QUERATOR_NODE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Stable ids: a StatefulSet without volumes, pods started together.
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert "volumeClaimTemplates" not in sts["spec"]
    # The advertised address is the pod's own DNS name through the headless Service, on the API port.
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    api_port = container_port(container, "http")
    host = f"{sts['metadata']['name']}-1"
    resolved = pod_env(container, {"metadata.name": host}, _any_secret(container))
    assert resolved["QUERATOR_NODE_ID"] == host
    assert resolved["QUERATOR_ADVERTISE_ADDRESS"] == (
        f"{host}.{headless['metadata']['name']}.{NAMESPACE}.svc.cluster.local:{api_port}"
    )
    assert resolved["QUERATOR_ADDRESS"] == f"0.0.0.0:{api_port}"
    assert resolved["QUERATOR_ADMIN_ADDRESS"] == f"0.0.0.0:{container_port(container, 'admin')}"
    assert {p["name"]: p["targetPort"] for p in headless["spec"]["ports"]} == {
        "http": "http",
        "admin": "admin",
    }


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_the_rendered_env_is_a_valid_server_config(rendered: Render, case: Case) -> None:
    """Every variable the chart sets is a setting of ``querator serve``, and together they load."""
    container = rendered(case.name).container
    names = {"QUERATOR_" + f.name.upper() for f in fields(ServerConfig)}
    assert set(env_vars(container)) <= names
    env = pod_env(container, {"metadata.name": "querator-0"}, _any_secret(container))
    config = load(None, env, {})  # validates --cluster too; cluster_config() would read the mounted files
    assert config.cluster
    assert config.node_id == "querator-0"


def test_defaults_wire_external_etcd_and_cassandra(rendered: Render) -> None:
    env = pod_env(rendered("defaults").container, {"metadata.name": "x"}, {})
    assert env["QUERATOR_CLUSTER"] == "etcd://etcd:2379/querator"
    assert env["QUERATOR_STORAGE"] == "cassandra"
    assert env["QUERATOR_CASSANDRA_HOSTS"] == "cassandra"
    assert env["QUERATOR_CASSANDRA_CONSISTENCY"] == "LOCAL_QUORUM"
    assert "QUERATOR_API_KEYS_FILE" not in env and "QUERATOR_CLUSTER_SECRET_FILE" not in env
    assert "QUERATOR_TENANCY" not in env


def test_processes_per_pod_get_a_port_each(rendered: Render) -> None:
    """With querator.processes above 1 each process is a member with its own port, declared on the pod;
    the defaults run one process per pod, as before."""
    assert "QUERATOR_PROCESSES" not in env_vars(rendered("defaults").container)
    container = rendered("processes").container
    config = load(None, pod_env(container, {"metadata.name": "querator-0"}, {}), {})
    assert config.processes == 2
    assert config.cluster_process_ports() == (2500, 2501)
    assert [container_port(container, f"process-{i}") for i in range(2)] == [2500, 2501]


@pytest.mark.parametrize(("case", "replicas"), [("defaults", 3), ("replicas-3", 3), ("replicas-7", 7)])
def test_replicas(rendered: Render, case: str, replicas: int) -> None:
    r = rendered(case)
    assert r.statefulset["spec"]["replicas"] == replicas
    assert r.all("HorizontalPodAutoscaler") == []


def test_hpa_owns_the_replica_count(rendered: Render) -> None:
    r = rendered("hpa")
    assert "replicas" not in r.statefulset["spec"]
    hpa = r.one("HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": r.statefulset["metadata"]["name"],
    }
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 9)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_probes_and_graceful_leave(rendered: Render, case: Case) -> None:
    r = rendered(case.name)
    container, pod = r.container, r.statefulset["spec"]["template"]["spec"]
    probes = {
        kind: (container[kind]["httpGet"]["path"], container[kind]["httpGet"]["port"])
        for kind in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    # Liveness and startup never ask for readiness (/ready depends on etcd and storage).
    assert probes == {
        "startupProbe": ("/health", "admin"),
        "livenessProbe": ("/health", "admin"),
        "readinessProbe": ("/ready", "admin"),
    }
    admin = container_port(container, "admin")
    assert env_vars(container)["QUERATOR_ADMIN_ADDRESS"]["value"].endswith(f":{admin}")
    # /ready may take its 5 s storage check before answering.
    assert container["readinessProbe"]["timeoutSeconds"] > 5
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > int(pre_stop[1])


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_hardened_security_contexts(rendered: Render, case: Case) -> None:
    r = rendered(case.name)
    for pod in (r.statefulset["spec"]["template"]["spec"], r.test_pod["spec"]):
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]


@pytest.mark.parametrize(
    ("case", "budget"), [("defaults", {"maxUnavailable": 1}), ("replicas-7", {"minAvailable": 5})]
)
def test_pod_disruption_budget(rendered: Render, case: str, budget: dict[str, int]) -> None:
    spec = rendered(case).one("PodDisruptionBudget")["spec"]
    assert {k: v for k, v in spec.items() if k != "selector"} == budget


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_secrets_are_referenced_never_inlined(rendered: Render, case: Case) -> None:
    r = rendered(case.name)
    assert r.all("Secret") == []
    for container in (r.container, r.test_pod["spec"]["containers"][0]):
        for name, var in env_vars(container).items():
            if re.search(r"(PASSWORD|USERNAME|SECRET|API_KEYS?|POSTGRES_URL)$", name):
                assert "secretKeyRef" in var.get("valueFrom", {}), f"{name} is not read from a Secret"


def test_auth_reads_every_credential_from_its_secret(rendered: Render) -> None:
    r = rendered("auth")
    container, pod = r.container, r.statefulset["spec"]["template"]["spec"]
    env = env_vars(container)
    assert env["QUERATOR_CASSANDRA_USERNAME"]["valueFrom"]["secretKeyRef"] == {
        "name": "cassandra-credentials",
        "key": "user",
    }
    assert env["QUERATOR_CASSANDRA_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "cassandra-credentials",
        "key": "cassandra-password",
    }
    # The *_FILE settings name a file inside the volume of the right Secret and key.
    volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    # Tenancy on: the hashes of apiKeys are the bootstrap admin's keys (docs/tenancy.md).
    assert env["QUERATOR_TENANCY"] == {"name": "QUERATOR_TENANCY", "value": "on"}
    for var, secret, key in [
        ("QUERATOR_API_KEYS_FILE", "querator-api-keys", "hashes"),
        ("QUERATOR_CLUSTER_SECRET_FILE", "querator-cluster", "secret"),
        ("QUERATOR_CASSANDRA_TLS_CA_FILE", "cassandra-ca", "ca.pem"),
    ]:
        directory, _, file = env[var]["value"].rpartition("/")
        volume = volumes[mounts[directory]]
        assert volume["secretName"] == secret
        assert volume["items"] == [{"key": key, "path": file}]
    test_env = env_vars(r.test_pod["spec"]["containers"][0])
    assert test_env["QUERATOR_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "querator-test-key",
        "key": "key",
    }
    cluster = pod_env(container, {"metadata.name": "x"}, _any_secret(container))["QUERATOR_CLUSTER"]
    assert cluster == (
        "etcd://etcd-0.etcd-headless:2379,etcd-1.etcd-headless:2379,etcd-2.etcd-headless:2379/prod/querator"
    )


def test_tls_reads_every_certificate_and_password_from_its_secret(rendered: Render) -> None:
    r = rendered("tls")
    container, pod = r.container, r.statefulset["spec"]["template"]["spec"]
    env = env_vars(container)
    assert env["QUERATOR_ETCD_USERNAME"]["valueFrom"]["secretKeyRef"] == {
        "name": "etcd-credentials",
        "key": "user",
    }
    volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for var, secret, key in [
        ("QUERATOR_TLS_CERT_FILE", "querator-tls", "tls.crt"),
        ("QUERATOR_TLS_KEY_FILE", "querator-tls", "tls.key"),
        ("QUERATOR_CLUSTER_TLS_CA_FILE", "querator-ca", "ca.pem"),
        ("QUERATOR_TLS_CLIENT_CA_FILE", "querator-ca", "ca.pem"),
        ("QUERATOR_CLUSTER_TLS_CERT_FILE", "querator-tls", "tls.crt"),
        ("QUERATOR_CLUSTER_TLS_KEY_FILE", "querator-tls", "tls.key"),
        ("QUERATOR_ETCD_TLS_CA_FILE", "etcd-ca", "ca.crt"),
        ("QUERATOR_ETCD_TLS_CERT_FILE", "etcd-client", "tls.crt"),
        ("QUERATOR_ETCD_TLS_KEY_FILE", "etcd-client", "tls.key"),
        ("QUERATOR_ETCD_PASSWORD_FILE", "etcd-credentials", "pass"),
    ]:
        directory, _, file = env[var]["value"].rpartition("/")
        mount = mounts[directory]
        volume = volumes[mount["name"]]
        assert (volume["secretName"], file, mount["readOnly"]) == (secret, key, True), var
        assert {"key": key, "path": file} in volume["items"], var
    # Only the password is mounted from the credentials Secret; the user name is an env reference.
    assert volumes[mounts["/etc/querator/etcd-auth"]["name"]]["items"] == [{"key": "pass", "path": "pass"}]
    # The helm test pod reaches the client Service over HTTPS, trusting the nodes' CA.
    test = r.test_pod["spec"]
    test_env = env_vars(test["containers"][0])
    assert test_env["QUERATOR_ENDPOINT"]["value"].startswith("https://")
    ca_dir, _, ca_file = test_env["SSL_CERT_FILE"]["value"].rpartition("/")
    [mount] = test["containers"][0]["volumeMounts"]
    [volume] = test["volumes"]
    assert (mount["mountPath"], mount["name"], ca_file) == (ca_dir, volume["name"], "ca.pem")
    assert volume["secret"]["secretName"] == "querator-ca"
    # Without TLS values nothing of it is rendered.
    defaults = env_vars(rendered("defaults").container)
    assert not [name for name in defaults if "TLS" in name or re.search("ETCD_(USERNAME|PASSWORD)", name)]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"tls.mutual": "true", "tls.existingSecret": "t"}, "tls.caSecret is required with tls.mutual"),
        ({"tls.caSecret": "ca"}, "tls.existingSecret is required with tls.caSecret or tls.mutual"),
        ({"cluster.etcd.tls.enabled": "true"}, "cluster.etcd.tls.caSecret is required"),
        ({"cluster.etcd.tls.clientSecret": "c"}, "cluster.etcd.tls.enabled is required"),
    ],
)
def test_tls_values_that_cannot_work_fail_the_render(helm: str, sets: dict[str, str], message: str) -> None:
    result = run_helm(helm, *template_args(sets=sets))
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_postgres_reads_its_url_and_credentials_from_a_secret(helm: str, rendered: Render) -> None:
    """With storage.backend postgres the URL, user and password are references to keys of the existing
    Secret, the CA a file of its own Secret's volume, and the rest plain settings the server loads."""
    r = rendered("postgres")
    container, pod = r.container, r.statefulset["spec"]["template"]["spec"]
    env = env_vars(container)
    for var, key in [
        ("QUERATOR_POSTGRES_URL", "uri"),
        ("QUERATOR_POSTGRES_USERNAME", "user"),
        ("QUERATOR_POSTGRES_PASSWORD", "pass"),
    ]:
        assert env[var]["valueFrom"]["secretKeyRef"] == {"name": "querator-postgres", "key": key}, var
    volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    directory, _, file = env["QUERATOR_POSTGRES_TLS_CA_FILE"]["value"].rpartition("/")
    assert mounts[directory]["readOnly"] is True
    volume = volumes[mounts[directory]["name"]]
    assert (volume["secretName"], volume["items"]) == ("postgres-ca", [{"key": "ca.pem", "path": file}])
    secrets = {
        ("querator-postgres", "uri"): "postgresql://db.example:5432/queues",
        ("querator-postgres", "user"): "queues",
        ("querator-postgres", "pass"): "hunter2",
    }
    config = load(None, pod_env(container, {"metadata.name": "q-querator-0"}, secrets), {})
    assert config.storage == "postgres"
    settings = config.postgres_settings()
    assert (settings.url, settings.username, settings.password) == tuple(secrets.values())
    assert (settings.schema, settings.connections) == ("queues_prod", 12)
    assert settings.tls_ca_file == "/etc/querator/postgres-ca/ca.pem"
    assert not [name for name in env if "CASSANDRA" in name]
    # Only the keys asked for are read: without usernameKey and passwordKey, the URL's own.
    plain = render(helm, sets={"storage.backend": "postgres", "storage.postgres.existingSecret": "pg"})
    plain_env = env_vars(plain.container)
    assert plain_env["QUERATOR_POSTGRES_URL"]["valueFrom"]["secretKeyRef"] == {"name": "pg", "key": "url"}
    assert not {
        "QUERATOR_POSTGRES_USERNAME",
        "QUERATOR_POSTGRES_PASSWORD",
        "QUERATOR_POSTGRES_TLS_CA_FILE",
    } & set(plain_env)
    assert "postgres-ca" not in {v["name"] for v in plain.statefulset["spec"]["template"]["spec"]["volumes"]}
    # The defaults (Cassandra) render nothing of PostgreSQL.
    assert not [name for name in env_vars(rendered("defaults").container) if "POSTGRES" in name]


def test_postgres_runs_several_processes_per_pod(helm: str) -> None:
    """PostgreSQL is shared by every process, as Cassandra is: querator.processes above 1 renders."""
    sets = {"storage.backend": "postgres", "storage.postgres.existingSecret": "pg", "querator.processes": "2"}
    env = env_vars(render(helm, sets=sets).container)
    assert env["QUERATOR_PROCESSES"]["value"] == "2"


def test_service_monitor_needs_the_crd_and_scrapes_every_node(helm: str, rendered: Render) -> None:
    r = rendered("servicemonitor")
    monitor = r.one("ServiceMonitor")
    # It selects the headless Service (ready or not, every node is listed) and its admin port.
    headless = r.headless_service
    assert labels_match(monitor["spec"]["selector"]["matchLabels"], headless["metadata"]["labels"])
    assert not labels_match(
        monitor["spec"]["selector"]["matchLabels"], r.client_service["metadata"]["labels"]
    )
    [endpoint] = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == ("admin", "/metrics", "15s")
    assert "admin" in {p["name"] for p in headless["spec"]["ports"]}
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    # The same values on a cluster without the Prometheus Operator render no ServiceMonitor.
    assert render(helm, [ci_file("servicemonitor")]).all("ServiceMonitor") == []


def test_ingress_routes_to_the_client_service(rendered: Render) -> None:
    r = rendered("ingress")
    ingress, service = r.one("Ingress"), r.client_service
    assert service["spec"]["type"] == "LoadBalancer"
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "queues.example.com"
    [path] = rule["http"]["paths"]
    assert path["backend"]["service"] == {"name": service["metadata"]["name"], "port": {"name": "http"}}
    assert "http" in {p["name"] for p in service["spec"]["ports"]}
    assert ingress["spec"]["ingressClassName"] == "nginx"
    # The client Service carries only the API: probes and metrics stay on the admin port.
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]


def test_the_helm_test_pod_runs_the_smoke_test_through_the_service(rendered: Render) -> None:
    r = rendered("defaults")
    pod, service = r.test_pod, r.client_service
    assert pod["spec"]["restartPolicy"] == "Never"
    [container] = pod["spec"]["containers"]
    assert container["command"] == ["python", "-c"]
    assert container["args"] == [(CHART / "files" / "helm-test.py").read_text()]
    endpoint = env_vars(container)["QUERATOR_ENDPOINT"]["value"]
    port = service["spec"]["ports"][0]["port"]
    assert endpoint == f"http://{service['metadata']['name']}.{NAMESPACE}.svc.cluster.local:{port}"
    assert container["image"] == r.container["image"]


def test_the_image_is_the_dockerfile_s(rendered: Render) -> None:
    """The chart runs the image deploy/docker/Dockerfile builds: its entrypoint, user and ports."""
    dockerfile = (ROOT / "deploy" / "docker" / "Dockerfile").read_text()
    r = rendered("defaults")
    assert len(re.findall(r"^FROM ", dockerfile, re.MULTILINE)) == 2
    assert re.search(r'^ENTRYPOINT \["querator"\]$', dockerfile, re.MULTILINE)
    assert r.container["args"] == ["serve"]
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.MULTILINE)
    assert user is not None
    context = r.statefulset["spec"]["template"]["spec"]["securityContext"]
    assert (int(user.group(1)), int(user.group(2))) == (context["runAsUser"], context["runAsGroup"])
    exposed = re.search(r"^EXPOSE (.+)$", dockerfile, re.MULTILINE)
    assert exposed is not None
    ports = {container_port(r.container, name) for name in ("http", "admin")}
    assert {int(p) for p in exposed.group(1).split()} == ports
    assert r.container["image"] == f"querator:{_chart()['appVersion']}"


def test_schema_consistency_levels_are_the_servers() -> None:
    """The schema offers exactly the levels ``--cassandra-consistency`` accepts (no serial ones)."""
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    levels = schema["properties"]["storage"]["properties"]["cassandra"]["properties"]["consistency"]["enum"]
    serial = {"SERIAL", "LOCAL_SERIAL"}
    assert set(levels) == set(ConsistencyLevel.name_to_value) - serial


def test_every_values_key_is_in_the_schema() -> None:
    """values.yaml documents nothing the schema would reject, and the schema knows every key."""
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def check(node: object, spec: dict[str, object], path: str) -> None:
        if not isinstance(node, dict) or "properties" not in spec:
            return
        properties = spec["properties"]
        assert isinstance(properties, dict)
        for key, value in node.items():
            assert key in properties, f"{path}{key} is not in values.schema.json"
            check(value, properties[key], f"{path}{key}.")

    check(values, schema, "")


def _chart() -> dict[str, str]:
    chart: dict[str, str] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return chart


def _any_secret(container: dict[str, object]) -> dict[tuple[str, str], str]:
    """A stand-in value for every Secret key the container reads (a URL where a URL is read)."""
    stand_ins = {}
    for name, var in env_vars(container).items():
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            value = "postgresql://db.example:5432/queues" if name.endswith("_URL") else f"secret-{ref['key']}"
            stand_ins[ref["name"], ref["key"]] = value
    return stand_ins


def test_notes_render_with_their_warnings(helm: str, tmp_path: Path) -> None:
    """NOTES.txt renders only at install time, which needs a cluster: render it here through a copy of
    the chart that wraps it in a ConfigMap."""
    chart = tmp_path / "querator"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "_notes.tpl").write_text('{{- define "notes" -}}\n' + notes + "\n{{- end }}\n")
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data:\n  notes: |\n{{ include "notes" . | indent 4 }}\n'
    )

    def rendered_notes(*sets: str) -> str:
        args = ["template", RELEASE, str(chart), "-n", NAMESPACE, "--show-only", "templates/notes.yaml"]
        done = run_helm(helm, *args, *(f"--set={s}" for s in sets))
        assert done.returncode == 0, done.stderr
        text: str = yaml.safe_load(done.stdout)["data"]["notes"]
        return text

    plain = rendered_notes()
    assert f"http://q-querator.{NAMESPACE}.svc.cluster.local:2319" in plain
    assert "API keys are off" in plain and "storage cassandra" in plain
    postgres = rendered_notes("storage.backend=postgres", "storage.postgres.existingSecret=pg")
    assert "storage postgres (the URL of Secret pg, schema querator)." in postgres
    warned = rendered_notes(
        "storage.backend=memory",
        "apiKeys.existingSecret=keys",
        "cluster.secret.existingSecret=cluster",
        "tests.enabled=false",
        "metrics.serviceMonitor.enabled=true",
    )
    for warning in ("a restart loses them", "no ServiceMonitor was created"):
        assert warning in warned
    assert "API keys are off" not in warned


def test_nodes_spread_over_hosts_and_zones(rendered: Render) -> None:
    """Constraints select the Querator pods, also where the values file gave no labelSelector."""
    pod = rendered("replicas-7").statefulset["spec"]["template"]["spec"]
    selector = rendered("replicas-7").statefulset["spec"]["selector"]
    [term] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert (term["topologyKey"], term["labelSelector"]) == ("kubernetes.io/hostname", selector)
    [spread] = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["labelSelector"] == selector
    soft = rendered("defaults").statefulset["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in soft


def test_a_keyless_node_answers_the_chart_s_host_names(rendered: Render) -> None:
    """Without API keys a node refuses Host names not its own (DNS rebinding, docs/configuration.md
    "Host names"): the chart names the client Service, the pods and the ingress hosts, and the names
    configured give it no other, so clients reaching it through any of them are served."""
    r = rendered("ingress")
    env = pod_env(r.container, {"metadata.name": "x"}, _any_secret(r.container))
    service, headless = r.client_service["metadata"]["name"], r.headless_service["metadata"]["name"]
    assert env["QUERATOR_ALLOWED_HOSTS"].split(",") == [
        f"{service}.{NAMESPACE}.svc",
        f"{service}.{NAMESPACE}.svc.cluster.local",
        f".{headless}.{NAMESPACE}.svc.cluster.local",
        "queues.example.com",
    ]
    hosts = AllowedHosts(env["QUERATOR_ALLOWED_HOSTS"].split(","))
    assert hosts.allows(env["QUERATOR_ADVERTISE_ADDRESS"].replace("$(QUERATOR_NODE_ID)", "x-0"))
    assert not hosts.allows(f"{service}.{NAMESPACE}")  # a namespace may be named as a public domain
