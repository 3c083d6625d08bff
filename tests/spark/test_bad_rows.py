"""Rows that cannot be items, and writes that cannot succeed, fail clearly -- or are skipped on request.

Never a silent loss: by default the job fails with a message naming the row and the reason; with
``onBadRow=skip`` the good rows are written and the skipped ones are counted in the reported totals.
Options and columns are checked on the driver before any task runs; a server's refusal fails the job
with the server's message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ServerProcess
from tests.spark.harness import drain, read_report, write_options

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BIG = 2000
"""Payload bytes of the oversized row (the tests set maxItemBytes below it)."""


def bad_frame(spark: Any) -> Any:
    rows = [("r0", b"fine"), ("r1", None), ("r2", b"x" * BIG), ("r3", b"also fine")]
    return spark.createDataFrame(rows, "ref string, payload binary").coalesce(1)


def error_text(info: pytest.ExceptionInfo[BaseException]) -> str:
    return str(info.value)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([("r0", b"ok"), ("r1", None)], "row 1: payload is null (column 'payload')"),
        ([("r0", b"ok"), ("r2", b"x" * BIG)], "row 1: item is too large"),
    ],
)
def test_bad_rows_fail_the_job_with_a_clear_message(
    spark: Any, server: ServerProcess, queue: str, rows: list[tuple[str, bytes | None]], message: str
) -> None:
    df = spark.createDataFrame(rows, "ref string, payload binary").coalesce(1)
    options = write_options(server.url, queue, referenceColumn="ref", maxItemBytes="1000")
    with pytest.raises(Exception) as info:
        df.write.format("querator").options(**options).mode("append").save()
    assert "bad row; partition 0 (stage" in error_text(info)
    assert message in error_text(info)
    assert "onBadRow=skip" in error_text(info)


def test_bad_rows_are_skipped_and_counted_on_request(
    spark: Any, server: ServerProcess, queue: str, report: Path
) -> None:
    options = write_options(
        server.url, queue, referenceColumn="ref", maxItemBytes="1000", onBadRow="skip", reportFile=str(report)
    )
    bad_frame(spark).write.format("querator").options(**options).mode("append").save()

    assert sorted(item.reference for _, item in drain(server.url, queue)) == ["r0", "r3"]
    [line] = read_report(report)
    assert (line["items"], line["skipped"]) == (2, 2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"payloadColumn": "nope"},
            "option 'payloadColumn' names column 'nope', which is not in the DataFrame",
        ),
        ({"kindColumn": "payload"}, "column 'payload' (kindColumn) must be a string, not binary"),
        ({"batchSize": "5000"}, "batchSize must be between 1 and 1000"),
        ({"bogus": "1"}, "unknown querator option(s): bogus"),
    ],
)
def test_bad_options_fail_before_any_task(
    spark: Any, server: ServerProcess, queue: str, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception) as info:
        bad_frame(spark).write.format("querator").options(**write_options(server.url, queue, **options)).mode(
            "append"
        ).save()
    assert message in error_text(info)


def test_overwrite_is_refused(spark: Any, server: ServerProcess, queue: str) -> None:
    with pytest.raises(Exception) as info:
        bad_frame(spark).write.format("querator").options(**write_options(server.url, queue)).mode(
            "overwrite"
        ).save()
    assert "only be appended to" in error_text(info)


def test_server_refusal_fails_with_the_servers_message(spark: Any, server: ServerProcess) -> None:
    df = spark.createDataFrame([("a",)], "payload string")
    with pytest.raises(Exception) as info:
        df.write.format("querator").options(**write_options(server.url, "no-such-queue")).mode(
            "append"
        ).save()
    text = error_text(info)
    assert "produce to queue 'no-such-queue'" in text
    assert "400" in text
    assert "does not exist" in text
