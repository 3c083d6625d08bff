"""Fixtures of the Helm chart tests: the helm binary, rendered cases of the values matrix (rendered
once per session), kubernetes-validate, and the integration tests' etcd and server processes."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from tests.integration.conftest import servers  # noqa: F401 - real `querator serve` processes
from tests.integration.etcd_server import etcd  # noqa: F401 - the session's real etcd

from .chart import CI_VALUES, Rendered, ci_values, helm_binary, render

MONITORING_API = "monitoring.coreos.com/v1"


@dataclass(frozen=True)
class Case:
    """One entry of the values matrix: a ci/ values file (or none: the defaults)."""

    name: str
    values: tuple[Path, ...] = ()
    api_versions: tuple[str, ...] = field(default=())


def matrix() -> list[Case]:
    """The defaults plus every ``ci/*-values.yaml``; the ServiceMonitor case renders on a cluster that
    has the Prometheus Operator's API, as ``--api-versions`` tells helm."""
    cases = [Case("defaults")]
    for file in ci_values():
        name = file.name.removesuffix("-values.yaml")
        apis = (MONITORING_API,) if name == "servicemonitor" else ()
        cases.append(Case(name, (file,), apis))
    return cases


CASES = matrix()
CASE_IDS = [c.name for c in CASES]


@pytest.fixture(scope="session")
def helm() -> str:
    """The helm executable (skips without one, fails under CI)."""
    return helm_binary()


@pytest.fixture(scope="session")
def rendered(helm: str) -> Callable[[str], Rendered]:
    """``rendered(case_name)``: the objects of one matrix case, rendered once per session."""
    by_name = {c.name: c for c in CASES}
    cache: dict[str, Rendered] = {}

    def get(name: str) -> Rendered:
        if name not in cache:
            case = by_name[name]
            cache[name] = render(helm, case.values, api_versions=case.api_versions)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def kubernetes_validate() -> ModuleType:
    """The kubernetes-validate package (a dev dependency): skips without it, fails under CI."""
    try:
        import kubernetes_validate
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("kubernetes-validate is not installed: install the dev extra")
        pytest.skip("kubernetes-validate is not installed (install the dev extra)")
    return kubernetes_validate


def ci_file(name: str) -> Path:
    """``ci/<name>-values.yaml``."""
    return CI_VALUES / f"{name}-values.yaml"
