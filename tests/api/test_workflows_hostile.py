"""Hostile or careless input on the workflow routes (docs/durable.md), in the manner of
tests/integration/test_hostile_requests.py: bodies over a route's limit, ids and names with control or
invisible characters or past their length, numbers out of range, error texts that grow a record past its
size, and a result whose client leaves mid-wait. Each is a 4xx with its message (docs/semantics.md §1.4),
and nothing is stored or left waiting.
"""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import aiohttp
import pytest

from querator.http import MAX_PRODUCE_BODY, SMALL_BODY, human_size
from querator.storage import journal
from querator.storage.journal import MAX_RECORD_BYTES
from tests.conftest import IGNORABLE, JSON, ODD, Api, eventually

from .test_workflows import append, claim, start, step

LIMITS = {
    "/v1/workflows.start": MAX_PRODUCE_BODY,
    "/v1/workflows.info": SMALL_BODY,
    "/v1/workflows.list": SMALL_BODY,
    "/v1/workflows.signal": MAX_PRODUCE_BODY,
    "/v1/workflows.update": MAX_PRODUCE_BODY,
    "/v1/workflows.cancel": SMALL_BODY,
    "/v1/workflows.result": SMALL_BODY,
    "/v1/workflows.claim": SMALL_BODY,
    "/v1/workflows.append": MAX_PRODUCE_BODY,
}
LONGEST_ID = "\U00020000" * 256
"""An id of the longest length accepted, each character outside the BMP: 12 bytes in escaped JSON."""
LONGEST_NAME = "\U00020001" * 256
LONGEST_SIGNAL_ID = "\U00020002" * 128
LONGEST_QUEUE = "\U00020003" * 512


@pytest.fixture
async def durable(api: Api) -> Api:
    await api.create("durable")
    return api


async def post_escaped(api: Api, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POSTs ``body`` as JSON with every non-ASCII character escaped (``\\uXXXX``), as Go's and Python's
    encoders may write it: the largest a JSON body gets."""
    return await post_raw(api, path, json.dumps(body, ensure_ascii=True).encode())


async def post_raw(api: Api, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    # A file object: aiohttp warns of a large body sent as bytes.
    async with api.session.post(api.base + path, data=io.BytesIO(body), headers=JSON) as resp:
        return resp.status, json.loads(await resp.read())


async def workflow_ids(api: Api) -> list[str]:
    return [w["workflow_id"] for w in (await api.post("/v1/workflows.list", {})).get("workflows", [])]


@pytest.mark.parametrize("path", sorted(LIMITS))
async def test_a_body_over_the_route_limit_is_refused(durable: Api, path: str) -> None:
    limit = LIMITS[path]
    body = b'{"workflow_id":"' + b"w" * limit + b'","name":"n","queue_name":"durable"}'
    status, reply = await post_raw(durable, path, body)
    assert (status, reply["message"]) == (400, f"request body exceeds {human_size(limit)} limit")
    assert await workflow_ids(durable) == []


@pytest.mark.parametrize("char", ODD, ids=[f"U+{ord(c):04X}" for c in ODD])
async def test_ids_and_names_with_control_or_invisible_characters_are_refused(
    durable: Api, char: str
) -> None:
    await start(durable, "wf")
    odd = f"a{char}b"
    entry = {"seq": 1, "kind": "step", "name": odd, "state": "done"}
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/workflows.start", {"workflow_id": odd, "name": "n", "queue_name": "durable"}, "workflow id"),
        ("/v1/workflows.start", {"workflow_id": "w2", "name": odd, "queue_name": "durable"}, "workflow name"),
        (
            "/v1/workflows.start",
            {"workflow_id": "w2", "name": "n", "queue_name": "durable", "parent_id": odd, "parent_seq": 1},
            "parent id",
        ),
        (
            "/v1/workflows.start",
            {"workflow_id": "w2", "name": "n", "queue_name": "durable", "encoding": odd},
            "encoding",
        ),
        ("/v1/workflows.info", {"workflow_id": odd}, "workflow id"),
        ("/v1/workflows.signal", {"workflow_id": odd, "name": "s"}, "workflow id"),
        ("/v1/workflows.signal", {"workflow_id": "wf", "name": odd}, "signal name"),
        ("/v1/workflows.signal", {"workflow_id": "wf", "name": "s", "signal_id": odd}, "signal id"),
        ("/v1/workflows.cancel", {"workflow_id": odd}, "workflow id"),
        ("/v1/workflows.result", {"workflow_id": odd, "request_timeout": "1s"}, "workflow id"),
        ("/v1/workflows.claim", {"workflow_id": odd}, "workflow id"),
        ("/v1/workflows.append", {"workflow_id": odd, "fence": 1}, "workflow id"),
        ("/v1/workflows.append", {"workflow_id": "wf", "fence": 1, "entries": [entry]}, "entry name"),
    ]
    for path, body, what in cases:
        status, reply = await post_escaped(durable, path, body)
        expected = (
            f"{what} is invalid; cannot contain control or invisible characters, found U+{ord(char):04X}"
        )
        assert (status, reply["message"]) == (400, expected), (path, body)
    assert await workflow_ids(durable) == ["wf"]
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf"})
    assert (info.get("fence", 0), info.get("entries"), info.get("signals")) == (0, None, None)


@pytest.mark.parametrize("char", IGNORABLE, ids=[f"U+{ord(c):04X}" for c in IGNORABLE])
async def test_new_ids_and_names_with_default_ignorable_characters_are_refused(
    durable: Api, char: str
) -> None:
    """Characters shown as nothing outside Cc and Cf, in what a start, signal or append records; an id
    only looked up keeps the older rule, so a workflow stored before still answers."""
    await start(durable, "wf")
    odd = f"a{char}b"
    entry = {"seq": 1, "kind": "step", "name": odd, "state": "done"}
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/workflows.start", {"workflow_id": odd, "name": "n", "queue_name": "durable"}, "workflow id"),
        ("/v1/workflows.start", {"workflow_id": "w2", "name": odd, "queue_name": "durable"}, "workflow name"),
        (
            "/v1/workflows.start",
            {"workflow_id": "w2", "name": "n", "queue_name": "durable", "encoding": odd},
            "encoding",
        ),
        ("/v1/workflows.signal", {"workflow_id": "wf", "name": odd}, "signal name"),
        ("/v1/workflows.signal", {"workflow_id": "wf", "name": "s", "signal_id": odd}, "signal id"),
        ("/v1/workflows.append", {"workflow_id": "wf", "fence": 1, "entries": [entry]}, "entry name"),
    ]
    for path, body, what in cases:
        status, reply = await post_escaped(durable, path, body)
        expected = (
            f"{what} is invalid; cannot contain control or invisible characters, found U+{ord(char):04X}"
        )
        assert (status, reply["message"]) == (400, expected), (path, body)
    assert await workflow_ids(durable) == ["wf"]
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf"})
    assert (info.get("fence", 0), info.get("entries"), info.get("signals")) == (0, None, None)
    status, reply = await post_escaped(durable, "/v1/workflows.info", {"workflow_id": odd})
    assert (status, reply["message"]) == (400, f"workflow does not exist; no workflow '{odd}'")


async def test_the_longest_ids_and_names_work_on_every_route(durable: Api) -> None:
    w = {"workflow_id": LONGEST_ID}

    async def ok(path: str, body: dict[str, Any]) -> dict[str, Any]:
        status, reply = await post_escaped(durable, path, body)
        assert status == 200, (path, reply)
        return reply

    # On the longest queue name too: its activations are produced there.
    await durable.create(LONGEST_QUEUE)
    await ok("/v1/workflows.start", w | {"name": LONGEST_NAME, "queue_name": LONGEST_QUEUE})
    assert [i["reference"] for i in await durable.items(LONGEST_QUEUE)] == [LONGEST_ID]
    await ok("/v1/workflows.signal", w | {"name": LONGEST_NAME, "signal_id": LONGEST_SIGNAL_ID})
    assert (await ok("/v1/workflows.claim", w))["outcome"] == "claimed"
    entry = {"seq": 1, "kind": "signal", "name": LONGEST_NAME, "state": "done"}
    await ok("/v1/workflows.append", w | {"fence": 1, "entries": [entry], "then": "complete"})
    info = await ok("/v1/workflows.info", w)
    assert (info["name"], info["signals"][0]["id"], info["entries"][0]["name"]) == (
        LONGEST_NAME,
        LONGEST_SIGNAL_ID,
        LONGEST_NAME,
    )
    listed = await ok("/v1/workflows.list", {"pivot": LONGEST_ID})
    assert [x["workflow_id"] for x in listed["workflows"]] == [LONGEST_ID]
    assert (await ok("/v1/workflows.result", w | {"request_timeout": "1s"}))["status"] == "completed"
    await ok("/v1/workflows.cancel", w)


async def test_ids_and_names_past_their_length_are_refused(durable: Api) -> None:
    await start(durable, "wf")
    long_id, long_name = LONGEST_ID + "x", LONGEST_NAME + "x"
    entry = {"seq": 1, "kind": "step", "name": long_name, "state": "done"}
    cases: list[tuple[str, dict[str, Any], str]] = [
        (
            "/v1/workflows.start",
            {"workflow_id": long_id, "name": "n", "queue_name": "durable"},
            "workflow id",
        ),
        (
            "/v1/workflows.start",
            {"workflow_id": "w", "name": long_name, "queue_name": "durable"},
            "workflow name",
        ),
        ("/v1/workflows.info", {"workflow_id": long_id}, "workflow id"),
        ("/v1/workflows.signal", {"workflow_id": "wf", "name": long_name}, "signal name"),
        ("/v1/workflows.claim", {"workflow_id": long_id}, "workflow id"),
        ("/v1/workflows.append", {"workflow_id": "wf", "fence": 1, "entries": [entry]}, "entry name"),
    ]
    for path, body, what in cases:
        status, reply = await post_escaped(durable, path, body)
        expected = f"{what} is invalid; cannot be greater than '256' characters"
        assert (status, reply["message"]) == (400, expected), (path, what)
    signal = {"workflow_id": "wf", "name": "s", "signal_id": LONGEST_SIGNAL_ID + "x"}
    status, reply = await post_escaped(durable, "/v1/workflows.signal", signal)
    assert (status, reply["message"]) == (
        400,
        "signal id is invalid; cannot be greater than '128' characters",
    )
    assert await workflow_ids(durable) == ["wf"]


async def test_numbers_out_of_range_are_refused(durable: Api) -> None:
    await start(durable, "wf")
    w = {"workflow_id": "wf"}
    start_body = {"workflow_id": "w2", "name": "n", "queue_name": "durable"}
    negative = "entries is invalid; attempts, group and group_size cannot be negative"
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/workflows.list", {"limit": -1}, "limit is invalid; cannot be negative, but -1 was requested"),
        ("/v1/workflows.list", {"limit": 65537}, "limit is invalid; cannot be greater than 65536"),
        (
            "/v1/workflows.start",
            start_body | {"parent_seq": -1},
            "parent seq is invalid; -1 was given without a parent id",
        ),
        (
            "/v1/workflows.start",
            start_body | {"parent_id": "wf", "parent_seq": -1},
            "parent seq is invalid; a child names the seq of its parent that started it",
        ),
        ("/v1/workflows.append", w | {"fence": -1}, "fence is invalid; cannot be negative, but -1 was given"),
        (
            "/v1/workflows.append",
            w | {"fence": 1, "entries": [step(-5)]},
            "entries is invalid; seq must be at least 1, got -5",
        ),
        (
            "/v1/workflows.append",
            w | {"fence": 1, "entries": [step(n) for n in range(1, 1002)]},
            "entries is invalid; at most 1000 entries to an append",
        ),
        *[
            ("/v1/workflows.append", w | {"fence": 1, "entries": [step(1, **{field: -1})]}, negative)
            for field in ("attempts", "group", "group_size")
        ],
        *[
            (
                "/v1/workflows.claim",
                w | {"claim_timeout": timeout},
                f"claim timeout is invalid; must be between 1s and 15m, got {shown}",
            )
            for timeout, shown in (("-1s", "-1s"), ("0s", "0s"), ("16m", "16m0s"))
        ],
        (
            "/v1/workflows.result",
            w | {"request_timeout": "16m"},
            "request timeout is invalid; maximum timeout is '15m' but '16m0s' was requested",
        ),
    ]
    for path, body, message in cases:
        error = await durable.error(path, body)
        assert (error.status, error.message) == (400, message), (path, body)
    # Past int32, the protobuf field's type, the body does not decode (455), as on every route.
    for path, body in [
        ("/v1/workflows.append", w | {"fence": 2**31}),
        ("/v1/workflows.list", {"limit": 2**31}),
        ("/v1/workflows.start", start_body | {"parent_seq": -(2**31) - 1}),
    ]:
        error = await durable.error(path, body)
        assert error.status == 455 and error.message.startswith("invalid value for int32 field"), path
    assert await workflow_ids(durable) == ["wf"]


async def test_numbers_and_times_at_their_limits_are_served(durable: Api) -> None:
    await start(durable, "wf")
    await claim(durable, "wf")
    stale = await durable.error("/v1/workflows.append", {"workflow_id": "wf", "fence": 2**31 - 1})
    assert (stale.status, stale.message) == (
        409,
        "workflow claimed elsewhere; fence 2147483647 is not the workflow's current claim",
    )
    far = step(2**31 - 1, attempts=2**31 - 1, group=2**31 - 1, group_size=2**31 - 1)
    far["wake_at"] = "9999-12-31T23:59:59.999999Z"
    await append(durable, 1, "wf", entries=[far], then="suspend", wake_at="9999-12-31T23:59:59Z")
    await claim(durable, "wf")
    await append(durable, 2, "wf", then="suspend", wake_at="0001-01-01T00:00:00Z")
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf"})
    [entry] = info["entries"]
    assert (entry["seq"], entry["attempts"], entry["wake_at"]) == (2**31 - 1, 2**31 - 1, far["wake_at"])


async def test_error_texts_count_toward_the_size_of_a_workflow(
    durable: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before errors counted, a worker could grow a record by megabytes of error text an append, each
    append rewriting all of it. They count toward the journal's bytes too, its rows' with its head's
    (docs/adr/0046; the limit lowered here to what two such errors leave room for)."""
    third = MAX_RECORD_BYTES // 3 + 1
    limit = 2 * third + 1000
    monkeypatch.setattr(journal, "MAX_JOURNAL_BYTES", limit)
    await start(durable, "wf")
    await claim(durable, "wf")
    failed = {"seq": 1, "kind": "step", "name": "s", "state": "error", "error": "E" * third}
    w = {"workflow_id": "wf", "fence": 1}
    for seq in (1, 2):
        assert await post_escaped(
            durable, "/v1/workflows.append", w | {"entries": [failed | {"seq": seq}]}
        ) == (
            200,
            {},
        )
    too_large = (400, f"workflow is too large; its journal's values pass {limit} bytes in all")
    status, reply = await post_escaped(
        durable, "/v1/workflows.append", w | {"entries": [failed | {"seq": 3}]}
    )
    assert (status, reply["message"]) == too_large
    status, reply = await post_escaped(
        durable, "/v1/workflows.append", w | {"then": "fail", "error": "E" * third}
    )
    assert (status, reply["message"]) == too_large
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf"})
    assert ([e["seq"] for e in info["entries"]], info["status"]) == ([1, 2], "running")


async def test_a_result_whose_client_leaves_leaves_nothing_waiting(durable: Api) -> None:
    await start(durable, "wf")
    waits = durable.service.workflows._results._watches
    async with aiohttp.ClientSession() as session:
        body = json.dumps({"workflow_id": "wf", "request_timeout": "10m"})
        waiting = asyncio.create_task(
            session.post(durable.base + "/v1/workflows.result", data=body, headers=JSON)
        )

        async def parked() -> bool:
            return "wf" in waits

        await eventually(parked)
        poller = waits["wf"].poller
        waiting.cancel()  # the client gives up: its connection closes mid-wait
        with pytest.raises(asyncio.CancelledError):
            await waiting

    async def gone() -> bool:
        return "wf" not in waits and poller.done()  # the last call's poller goes with it

    await eventually(gone)
    # The workflow is as it was, and a later wait is served.
    await claim(durable, "wf")
    await append(durable, 1, "wf", then="complete")
    done = await durable.post("/v1/workflows.result", {"workflow_id": "wf", "request_timeout": "10m"})
    assert done["status"] == "completed" and waits == {}


async def test_a_result_whose_client_leaves_does_not_strand_another_wait(durable: Api) -> None:
    """Two callers wait for one workflow and the first leaves: the second is still woken by the finish
    (on the FakeClock, a wait that missed it would never end)."""
    await start(durable, "wf")
    waits = durable.service.workflows._results._watches
    body = {"workflow_id": "wf", "request_timeout": "10m"}
    staying = asyncio.create_task(durable.post("/v1/workflows.result", body))
    async with aiohttp.ClientSession() as session:
        leaving = asyncio.create_task(
            session.post(durable.base + "/v1/workflows.result", data=json.dumps(body), headers=JSON)
        )

        async def both_parked() -> bool:
            return "wf" in waits and waits["wf"].waiters == 2

        await eventually(both_parked)
        leaving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leaving
    await claim(durable, "wf")
    await append(durable, 1, "wf", then="complete")
    assert (await asyncio.wait_for(staying, 10))["status"] == "completed"
    assert waits == {}
