"""The soak harness (bench/soak.py) end to end, shrunk to seconds: one kill -9 and restart on sqlite,
samples twice a second, then the drain and the checker. The real soak runs outside CI (30 minutes)."""

from __future__ import annotations

import csv
from pathlib import Path

from bench.soak import SoakConfig, run_soak


async def test_short_soak_with_one_fault(tmp_path: Path) -> None:
    config = SoakConfig(
        out=tmp_path / "soak",
        duration=4.0,
        rate=200.0,
        lease_timeout=1.0,
        fault_every=2.0,
        faults=("kill9",),
        sample_every=0.5,
    )
    assert [kind for _, kind in config.fault_schedule()] == ["kill9"]

    result = await run_soak(config, log=lambda line: None)

    with result.csv_path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 2
    marked = [row["faults"] for row in rows if row["faults"]]
    assert len(marked) == 1 and marked[0].startswith("kill9@"), marked
    assert any(row["server_rss_mb"] and row["produced_per_s"] != "0.00" for row in rows)
    assert result.svg_path.read_text().startswith("<svg")
    assert "kill9" in result.svg_path.read_text()
    assert len(result.faults) == 1 and result.faults[0].end > result.faults[0].start
    report = result.report
    print(report.summary())
    assert report.acknowledged > 0 and report.deliveries > 0
    assert report.problems() == [], report.summary()
