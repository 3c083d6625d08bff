"""The schedules routes over real HTTP (docs/schedules.md): the model, the validation messages, firing
on the FakeClock, pause and resume, catch-up after a restart, and protobuf."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest

from querator.clock import FakeClock, from_datetime
from querator.storage.base import LIST_PAGE_BYTES
from querator.wire import decode_protobuf, encode_protobuf
from querator.wire import messages as m
from tests.conftest import Api, ServerFactory, eventually

START = from_datetime(datetime(2026, 1, 1, 12, tzinfo=UTC)) + 500_000
"""Half a second past a whole second: each advance of one second passes exactly one tick."""
MISSING = "schedule does not exist; no such schedule named 'nope'"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def schedule(name: str = "every-second", **fields: Any) -> dict[str, Any]:
    body = {"name": name, "cron": "* * * * * *", "queue_name": "q"}
    body.update(fields)
    return body


async def references(api: Api, queue: str = "q") -> list[str]:
    return [i.get("reference", "") for i in await api.items(queue)]


async def ticks_become(api: Api, expected: list[str]) -> None:
    async def check() -> bool:
        return await references(api) == expected

    try:
        await eventually(check)
    except AssertionError:
        assert await references(api) == expected


@pytest.mark.one_process
async def test_create_info_and_list(api: Api) -> None:
    await api.create("q")
    created = await api.post(
        "/v1/schedules.create",
        schedule(
            "nightly", cron="30 2 * * *", time_zone="Europe/Berlin", catch_up="all", catch_up_limit=5,
            jitter="1m", kind="report", encoding="text/plain", reference="r", payload="aGk=",
        ),
    )  # fmt: skip
    expected = {
        "name": "nightly", "cron": "30 2 * * *", "time_zone": "Europe/Berlin", "queue_name": "q",
        "catch_up": "all", "catch_up_limit": 5, "jitter": "1m0s", "kind": "report",
        "encoding": "text/plain", "reference": "r", "payload": "aGk=",
        "created_at": "2026-01-01T12:00:00.500000Z", "updated_at": "2026-01-01T12:00:00.500000Z",
        "next_tick": "2026-01-02T01:30:00Z", "owner": "local",
    }  # fmt: skip
    assert created == expected
    assert await api.post("/v1/schedules.info", {"name": "nightly"}) == expected
    await api.post("/v1/schedules.create", schedule("a"))
    listed = await api.post("/v1/schedules.list", {})
    assert [s["name"] for s in listed["items"]] == ["a", "nightly"]
    assert listed["items"][0]["catch_up"] == "one" and listed["items"][0]["time_zone"] == "UTC"
    page = await api.post("/v1/schedules.list", {"pivot": "b", "limit": 1})
    assert [s["name"] for s in page["items"]] == ["nightly"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "61 * * * *"}, "cron is invalid; '61 * * * *': Bad minute"),
        ({"cron": ""}, "cron is invalid; cannot be empty"),
        ({"cron": "* * *"}, "cron is invalid; '* * *' has 3 fields, expected 5 (minute hour day month "
         "weekday) or 6 (with seconds first)"),
        ({"time_zone": "Mars/Olympus"}, "time zone is invalid; 'Mars/Olympus' is not a known IANA time zone"),
        ({"queue_name": "nope"}, "queue does not exist; no such queue named 'nope'"),
        ({"queue_name": ""}, "queue name is invalid; queue name cannot be empty"),
        ({"catch_up": "sometimes"}, "catch up is invalid; 'sometimes' is not one of skip, one, all"),
        ({"catch_up": "all", "catch_up_limit": -1},
         "catch up limit is invalid; cannot be negative but -1 was given"),
        ({"catch_up": "all", "catch_up_limit": 1001},
         "catch up limit is invalid; cannot be greater than 1000"),
        ({"catch_up_limit": 3}, "catch up limit is invalid; only catch up 'all' takes a limit, not 'one'"),
        ({"jitter": "soon"},
         "jitter is invalid; time: invalid duration \"soon\" - expected format: 500ms, 30s or 5m"),
        ({"jitter": "-1s"}, "jitter is invalid; cannot be negative but '-1s' was given"),
        ({"jitter": "25h"}, "jitter is invalid; cannot be greater than '24h0m0s'"),
        ({"name": ""}, "schedule name is invalid; cannot be empty"),
        ({"name": "a b"}, "schedule name is invalid; 'a b' cannot contain whitespace"),
        ({"name": "x" * 97}, "schedule name is invalid; cannot be greater than '96' characters"),
        ({"name": "a\u200bb"}, "schedule name is invalid; cannot contain control or invisible characters, "
         "found U+200B"),
    ],
)  # fmt: skip
async def test_invalid_schedules_are_refused(api: Api, fields: dict[str, Any], message: str) -> None:
    await api.create("q")
    error = await api.error("/v1/schedules.create", schedule(**fields))
    assert (error.status, error.message) == (400, message)
    assert await api.post("/v1/schedules.list", {}) == {}


async def test_names_that_do_not_exist_or_exist_already(api: Api) -> None:
    await api.create("q")
    await api.post("/v1/schedules.create", schedule("s"))
    error = await api.error("/v1/schedules.create", schedule("s"))
    assert error.message == "invalid schedule; 's' already exists"
    for route in ("info", "delete", "pause", "resume"):
        error = await api.error(f"/v1/schedules.{route}", {"name": "nope"})
        assert (error.status, error.message) == (
            400,
            MISSING,
        )
    error = await api.error("/v1/schedules.update", schedule("nope"))
    assert error.message == MISSING
    error = await api.error("/v1/schedules.info", {})
    assert error.message == "schedule name is invalid; cannot be empty"
    error = await api.error("/v1/schedules.list", {"limit": 1001})
    assert error.message == "limit is invalid; cannot be greater than 1000"


async def test_refresh_takes_a_valid_name_and_is_harmless(api: Api, clock: FakeClock) -> None:
    """``schedules.refresh`` (node to node: a change made elsewhere) reads the schedules again; a name
    no schedule could have is refused, one that names no schedule changes nothing."""
    for name, message in [
        ("", "schedule name is invalid; cannot be empty"),
        ("a b", "schedule name is invalid; 'a b' cannot contain whitespace"),
        ("x" * 97, "schedule name is invalid; cannot be greater than '96' characters"),
    ]:
        error = await api.error("/v1/schedules.refresh", {"name": name})
        assert (error.status, error.message) == (400, message)
    await api.create("q")
    await api.post("/v1/schedules.create", schedule("s"))
    assert await api.post("/v1/schedules.refresh", {"name": "nope"}) == {"code": 200}
    assert await api.post("/v1/schedules.refresh", {"name": "s"}) == {"code": 200}
    clock.advance(1)
    await ticks_become(api, ["s@2026-01-01T12:00:01Z"])


async def test_each_tick_produces_one_item_named_by_its_time(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.post("/v1/schedules.create", schedule("s"))
    fired: list[str] = []
    for second in range(1, 4):
        clock.advance(1)
        fired.append(f"s@2026-01-01T12:00:0{second}Z")
        await ticks_become(api, fired)
    info = await api.post("/v1/schedules.info", {"name": "s"})
    assert (info["last_tick"], info["next_tick"]) == ("2026-01-01T12:00:03Z", "2026-01-01T12:00:04Z")


async def test_a_tick_takes_the_item_template(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    body = schedule("s", cron="0 * * * * *", kind="k", encoding="e", reference="nightly", payload="aGk=")
    await api.post("/v1/schedules.create", body)
    clock.advance(60)
    await ticks_become(api, ["nightly"])
    (item,) = await api.items("q")
    assert (item["kind"], item["encoding"], item["reference"], item["payload"]) == (
        "k",
        "e",
        "nightly",
        "aGk=",
    )


async def test_pause_stops_ticks_and_resume_skips_what_came_meanwhile(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.post("/v1/schedules.create", schedule("s"))
    clock.advance(1)
    await ticks_become(api, ["s@2026-01-01T12:00:01Z"])
    paused = await api.post("/v1/schedules.pause", {"name": "s"})
    assert paused["paused"] is True and "next_tick" not in paused
    clock.advance(5)
    resumed = await api.post("/v1/schedules.resume", {"name": "s"})
    assert "paused" not in resumed and resumed["next_tick"] == "2026-01-01T12:00:07Z"
    clock.advance(1)
    await ticks_become(api, ["s@2026-01-01T12:00:01Z", "s@2026-01-01T12:00:07Z"])


async def test_update_and_delete(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.create("other")
    await api.post("/v1/schedules.create", schedule("s", cron="0 0 * * *"))
    updated = await api.post("/v1/schedules.update", schedule("s", queue_name="other", cron="* * * * * *"))
    assert (updated["queue_name"], updated["next_tick"]) == ("other", "2026-01-01T12:00:01Z")
    clock.advance(1)

    async def fired() -> bool:
        return await references(api, "other") == ["s@2026-01-01T12:00:01Z"]

    await eventually(fired)
    await api.post("/v1/schedules.delete", {"name": "s"})
    assert await api.post("/v1/schedules.list", {}) == {}
    clock.advance(5)
    await api.post("/v1/schedules.create", schedule("later"))  # a pass of the scheduler after the delete
    clock.advance(1)
    await ticks_become(api, ["later@2026-01-01T12:00:07Z"])
    assert await references(api, "other") == ["s@2026-01-01T12:00:01Z"]


async def test_protobuf_requests_and_replies(api: Api) -> None:
    await api.create("q")
    body = encode_protobuf(m.ScheduleInfo(name="pb", cron="*/5 * * * *", queue_name="q", payload=b"\x00"))
    headers = {"Content-Type": "application/protobuf", "Accept": "application/protobuf"}
    async with api.session.post(api.base + "/v1/schedules.create", data=body, headers=headers) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"] == "application/protobuf"
        created = decode_protobuf(await resp.read(), m.ScheduleInfo)
    assert (created.name, created.cron, created.payload, created.catch_up) == (
        "pb",
        "*/5 * * * *",
        b"\x00",
        "one",
    )
    request = encode_protobuf(m.SchedulesRequest(name="nope"))
    async with api.session.post(api.base + "/v1/schedules.info", data=request, headers=headers) as resp:
        assert resp.status == 400
        reply = decode_protobuf(await resp.read(), m.Reply)
    assert reply.message == MISSING


# Back at 12:02:00.5, the tick of 12:02:00 is on time and fires under every policy; 12:00:40 to 12:01:40
# were missed: skip fires none of them, one the newest, all each.
@pytest.mark.parametrize(("catch_up", "expected"), [("skip", [5]), ("one", [4, 5]), ("all", [1, 2, 3, 4, 5])])
async def test_a_restart_catches_up_by_policy_and_fires_nothing_twice(
    start_server: ServerFactory, backend: str, catch_up: str, expected: list[int]
) -> None:
    if backend == "memory":
        pytest.skip("a restart keeps schedules on sqlite and PostgreSQL; memory forgets them")
    clock = FakeClock(START)
    first = await start_server(clock, data="restart")
    await first.create("q")
    await first.post("/v1/schedules.create", schedule("s", cron="*/20 * * * * *", catch_up=catch_up))
    clock.advance(20)
    await ticks_become(first, ["s@2026-01-01T12:00:20Z"])
    await first.service.shutdown()
    clock.advance(100)  # down from 12:00:20.5 to 12:02:00.5

    second = await start_server(clock, data="restart")
    missed = [f"s@2026-01-01T12:0{(n * 20 + 20) // 60}:{(n * 20 + 20) % 60:02d}Z" for n in range(1, 6)]
    want = ["s@2026-01-01T12:00:20Z"] + [missed[n - 1] for n in expected]
    await ticks_become(second, want)
    clock.advance(20)
    await ticks_become(second, [*want, "s@2026-01-01T12:02:20Z"])
    info = await second.post("/v1/schedules.info", {"name": "s"})
    assert info["last_tick"] == "2026-01-01T12:02:20Z"


async def test_clock_jumps_fire_nothing_twice_and_catch_up_by_policy(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.create("marks")
    await api.post("/v1/schedules.create", schedule("s"))
    clock.advance(1)
    await ticks_become(api, ["s@2026-01-01T12:00:01Z"])
    clock.jump(-3600)  # an NTP step back: 11:00:01.5
    # A second schedule fires in the same scheduler pass as "s": once its tick is in, "s" was looked at.
    await api.post("/v1/schedules.create", schedule("mark", queue_name="marks"))
    clock.advance(1)

    async def marked() -> bool:
        return await references(api, "marks") == ["mark@2026-01-01T11:00:02Z"]

    await eventually(marked)
    assert await references(api) == ["s@2026-01-01T12:00:01Z"]
    clock.advance(3600)  # back at 12:00:02.5
    await ticks_become(api, ["s@2026-01-01T12:00:01Z", "s@2026-01-01T12:00:02Z"])
    clock.advance(60)  # a step forward to 12:01:02.5: 12:00:03 .. 12:00:52 are missed, one fires
    on_time = [f"s@2026-01-01T12:00:{n}Z" for n in range(53, 60)] + [
        f"s@2026-01-01T12:01:0{n}Z" for n in range(3)
    ]
    await ticks_become(
        api, ["s@2026-01-01T12:00:01Z", "s@2026-01-01T12:00:02Z", "s@2026-01-01T12:00:52Z", *on_time]
    )


async def test_a_list_page_ends_at_the_payload_byte_cap(api: Api) -> None:
    await api.create("q")
    big = base64.b64encode(b"x" * 180_000).decode()
    for n in range(25):
        await api.post("/v1/schedules.create", schedule(f"s{n:02d}", payload=big))
    first = (await api.post("/v1/schedules.list", {"limit": 1000}))["items"]
    assert len(first) == LIST_PAGE_BYTES // 180_000  # 23 payloads fit in 4 MiB, the 24th would not
    rest = (await api.post("/v1/schedules.list", {"pivot": first[-1]["name"] + "~"}))["items"]
    assert [s["name"] for s in first + rest] == [f"s{n:02d}" for n in range(25)]


@pytest.mark.one_process  # its scheduler must own the schedule's slot: a member of two may not
async def test_a_scheduler_that_keeps_failing_is_restarted_and_shown_by_ready(
    api: Api, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler task that died stopped every schedule of the node for good while /ready passed: it is
    started again after a back-off, counted, and a node whose scheduler keeps failing is not ready."""
    await api.create("q")
    await api.post("/v1/schedules.create", schedule())
    scheduler = api.service.scheduler
    store = scheduler._store
    readable = store.list_slot_schedules

    async def unreadable(slot: int, pivot: str, limit: int) -> Any:
        raise RuntimeError("a bug in the store")

    monkeypatch.setattr(store, "list_slot_schedules", unreadable)
    scheduler.ring_changed()
    for wait_s in (1, 2):  # the back-off doubles
        await eventually(lambda wait_s=wait_s: _restarted(scheduler, wait_s))
        clock.advance(wait_s)
    await eventually(lambda: _restarted(scheduler, 3))
    async with api.session.get(api.base + "/ready") as resp:
        assert resp.status == 503
        assert (await resp.json(content_type=None))["output"] == (
            "background task schedules keeps failing (3 times in a row): RuntimeError: a bug in the store"
        )
    async with api.session.get(api.base + "/metrics") as resp:
        assert 'querator_task_restarts_total{task="schedules"} 3.0' in await resp.text()
    monkeypatch.setattr(store, "list_slot_schedules", readable)
    clock.advance(4)  # started again: it fires the schedule
    await eventually(lambda: _has_ticks(api))
    clock.advance(30)  # a run that lasts has recovered
    await eventually(lambda: _ready(api))


async def _restarted(scheduler: Any, n: int) -> bool:
    return bool(scheduler.task.restarts == n)


async def _has_ticks(api: Api) -> bool:
    return bool(await references(api))


async def _ready(api: Api) -> bool:
    async with api.session.get(api.base + "/ready") as resp:
        return resp.status == 200
