"""Fixtures of the Spark tests: one SparkSession and one ``querator serve`` (sqlite) for all of them.

Both are package-scoped: started by the first test of ``tests/spark/`` and stopped after its last, so
the rest of the suite does not share the cores and memory with an idle JVM. Starting Spark costs tens
of seconds on the 2-core CI machine, so every Spark test shares one
``local[2,4]`` session (two task threads, a failed task tried up to 4 times, as on a cluster) and one
server process; each test isolates itself with its own queue. Without pyspark the test modules skip (see
``harness.py``) -- unless ``CI`` is set: then they fail, so nothing passes by accident.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from querator.client import Client
from querator.wire import messages as m
from tests.integration.conftest import ROOT, ServerProcess, Servers


@pytest.fixture(scope="package")
def spark() -> Iterator[Any]:
    """The Spark tests' SparkSession, with the querator format and the fault-injecting ones registered."""
    # The Python workers must run this interpreter (it has pyarrow and querator) and import
    # tests.spark.faults by name.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("querator-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        # Inert in local mode (see tests/spark/faults.py), on so that the sink runs as it would with it.
        .config("spark.speculation", "true")
        .config("spark.sql.streaming.stopTimeout", "60s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from querator.spark import register
    from tests.spark.faults import SOURCES

    register(session)
    for source in SOURCES:
        session.dataSource.register(source)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One sqlite ``querator serve`` for all the Spark tests."""
    base = tmp_path_factory.mktemp("spark-servers")
    servers = Servers(base)
    try:
        yield servers.start("--storage", "sqlite", "--data-dir", str(base / "data"), "--log-level", "warn")
    finally:
        servers.close()


@pytest.fixture
def queue(server: ServerProcess) -> Iterator[str]:
    """A fresh 4-partition queue (deleted afterwards)."""
    name = f"spark-{uuid.uuid4().hex[:8]}"
    with Client(server.url) as client:
        client.create_queue(
            m.QueueInfo(queue_name=name, lease_timeout="5m", expire_timeout="1h", requested_partitions=4)
        )
        yield name
        client.delete_queue(name, force=True)


@pytest.fixture
def report(tmp_path: Path) -> Path:
    """A ``reportFile`` path for one test."""
    return tmp_path / "report.jsonl"
