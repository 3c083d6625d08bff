"""The sink's pure parts, without Spark running: option parsing and the column mapping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest

import tests.spark.harness  # noqa: F401 - skips this module without pyspark (fails in CI)
from querator.spark import BadRowError, SinkConfig, SinkConfigError
from querator.spark._items import ItemMapper


def config(**options: str) -> SinkConfig:
    return SinkConfig.from_options({"endpoint": "http://a:1, http://b:2/", "queue": "q", **options})


def test_options_are_parsed_case_insensitively_with_defaults() -> None:
    c = config(BATCHSIZE="500", requestTimeout="1.5s", retryBackoff="0.2", onBadRow="SKIP", Dedup="off")
    assert c.endpoints == ("http://a:1", "http://b:2")
    assert (c.batch_size, c.request_timeout, c.retry_backoff, c.skip_bad_rows, c.dedup) == (
        500,
        1.5,
        0.2,
        True,
        False,
    )
    assert c.request_timeout_text == "1500ms"
    assert (config().batch_size, config().max_in_flight, config().payload_column) == (1000, 4, "payload")
    # Spark's own options pass through silently.
    assert config(path="/x", checkpointLocation="/c").queue == "q"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": ""}, "option 'queue' is required"),
        ({"endpoint": ""}, "option 'endpoint' is required"),
        ({"endpoint": "localhost:2319"}, "must be http:// or https:// URLs"),
        ({"batchSize": "0"}, "'batchsize' must be at least 1"),
        ({"maxInFlight": "many"}, "'maxinflight' must be an integer"),
        ({"requestTimeout": "soon"}, "'requesttimeout' must be a duration"),
        ({"dedup": "maybe"}, "'dedup' must be true or false"),
        ({"onBadRow": "ignore"}, "'onBadRow' must be 'fail' or 'skip'"),
        ({"batchsise": "10"}, "unknown querator option(s): batchsise"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(SinkConfigError) as info:
        config(**options)
    assert message in str(info.value)


def test_items_carry_payload_columns_and_derived_dedup_ids() -> None:
    mapper = ItemMapper(config(), "w-3-", "partition 3")
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    items = mapper.map(
        ["text", b"\x00\x01", "zwölf"],
        {
            "reference": ["r0", None, "r2"],
            "kind": ["k", "k", None],
            "enqueue_at": [None, at, at.replace(tzinfo=None)],
        },
        first_row=10,
    )
    got = [(i.item.utf8, i.item.bytes, i.item.reference, i.item.kind, i.item.dedup_id) for i in items]
    assert got == [
        ("text", b"", "r0", "k", "w-3-10"),
        ("", b"\x00\x01", "", "k", "w-3-11"),
        ("zwölf", b"", "r2", "", "w-3-12"),
    ]
    assert items[0].item.enqueue_at is None
    assert items[1].item.enqueue_at == at.astimezone(UTC)
    assert items[2].item.enqueue_at == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)  # naive: UTC


def test_dedup_column_or_none() -> None:
    by_column = ItemMapper(config(dedupIdColumn="key"), "w-0-", "p")
    assert [i.item.dedup_id for i in by_column.map(["a"], {"dedup_id": ["order-1"]}, 0)] == ["order-1"]
    off = ItemMapper(config(dedup="false"), "w-0-", "p")
    assert [i.item.dedup_id for i in off.map(["a"], {}, 0)] == [""]


def test_whole_row_is_json() -> None:
    mapper = ItemMapper(config(payloadColumn="*"), "w-0-", "p")
    [item] = mapper.map([{"n": 1, "at": datetime(2030, 1, 1, tzinfo=UTC)}], {}, 0)
    assert msgspec.json.decode(item.item.bytes) == {"n": 1, "at": "2030-01-01T00:00:00Z"}
    assert item.item.encoding == "application/json"


@pytest.mark.parametrize(
    ("payloads", "fields", "reason"),
    [
        ([None], {}, "row 7: payload is null (column 'payload')"),
        ([42], {}, "row 7: payload must be a string or binary, not int"),
        (["x" * 2000], {}, "row 7: item is too large"),
        ([b"x" * 1500], {}, "row 7: item is too large"),  # 1500 bytes are 2000 in base64
        (["x"], {"dedup_id": [None]}, "row 7: dedup id is null"),
        (["x"], {"dedup_id": ["d" * 129]}, "row 7: dedup id is longer than 128 characters"),
    ],
)
def test_bad_rows_fail_or_are_counted(
    payloads: list[object], fields: dict[str, list[object]], reason: str
) -> None:
    options = {"maxItemBytes": "1800"}
    if "dedup_id" in fields:
        options["dedupIdColumn"] = "key"
    with pytest.raises(BadRowError) as info:
        ItemMapper(config(**options), "w-0-", "partition 0").map(payloads, fields, 7)
    assert str(info.value).startswith(f"bad row; partition 0 {reason}")

    skipping = ItemMapper(config(onBadRow="skip", **options), "w-0-", "partition 0")
    assert (
        skipping.map([*payloads, "fine"], {k: [*v, "ok"] for k, v in fields.items()}, 7)[0].item.utf8
        == "fine"
    )
    assert skipping.skipped == 1
    assert skipping.first_skip is not None and reason in skipping.first_skip
