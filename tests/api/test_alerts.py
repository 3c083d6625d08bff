"""The alert rules next to the Grafana dashboard (deploy/prometheus/alerts.yaml): promtool accepts them
and their unit tests pass (deploy/prometheus/alerts-test.yaml), and every metric they name is one a node
exports."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Api

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts-test.yaml"
PROMTOOL_LINK = ROOT / ".cache" / "promtool" / "promtool"
PROMTOOL_TIMEOUT = 60.0
PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself for every target."""


def promtool() -> str:
    """The promtool executable; skips the test when there is none (fails under CI)."""
    path = os.environ.get("PROMTOOL") or str(PROMTOOL_LINK)
    if os.access(path, os.X_OK):
        return path
    message = f"no promtool at {path}: run scripts/promtool.sh (or set PROMTOOL)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def run_promtool(*args: str) -> str:
    done = subprocess.run(
        [promtool(), *args], capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def expressions() -> dict[str, str]:
    """Each alert's expression, by alert name."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def test_promtool_accepts_the_rules() -> None:
    assert "SUCCESS: 5 rules found" in run_promtool("check", "rules", str(RULES))


def test_the_rules_pass_their_unit_tests() -> None:
    """Each rule fires for the series that must fire it, with its labels and texts, and stays quiet for
    the others (a node alone, a counter that stopped, a partition that recovered, another job)."""
    assert "SUCCESS" in run_promtool("test", "rules", str(RULE_TESTS))


def test_the_rules_cover_what_an_operator_needs() -> None:
    assert set(expressions()) == {
        "QueratorOldestItemTooOld",
        "QueratorDeadLettersGrowing",
        "QueratorPartitionsFailing",
        "QueratorNodeNotReady",
        "QueratorMemberMissing",
    }


@pytest.mark.one_process
async def test_the_rules_use_only_exported_metrics(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    async with api.session.get(api.base + "/metrics") as resp:
        exported = {s.name for f in text_string_to_metric_families(await resp.text()) for s in f.samples}
    for alert, expr in expressions().items():
        # Metric names: identifiers that are not followed by "(" (functions, aggregations) and are not
        # label names, keywords or durations.
        without_labels = re.sub(r"\{[^}]*\}|\b(?:by|on|without|ignoring)\s*\([^)]*\)|\[[^\]]*\]", "", expr)
        names = set(re.findall(r"\b([a-z_][a-z0-9_]*)\b(?!\s*\()", without_labels))
        names -= {"and", "or", "unless", "bool"}
        assert names, alert
        assert names <= exported | PROMETHEUS_OWN, f"{alert}: {names - exported - PROMETHEUS_OWN}"
