"""The schedule calls of ``AsyncClient`` and ``Client`` against a real in-process server (JSON and
protobuf), and ``querator schedules ...`` against a real ``querator serve`` subprocess."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import msgspec
import pytest

from querator.client import AsyncClient, Client
from querator.errors import InvalidOption

from .test_client_cli import cli, cli_endpoint, client, endpoint, ok

__all__ = ["cli_endpoint", "client", "endpoint"]  # fixtures


async def test_schedule_calls(client: AsyncClient) -> None:
    await client.create_queue("sq")
    created = await client.create_schedule(
        "s", "*/5 * * * *", "sq", time_zone="Europe/Berlin", catch_up="all", catch_up_limit=3,
        jitter=timedelta(seconds=2), payload="hi", kind="k", encoding="e", reference="r",
    )  # fmt: skip
    assert (created.time_zone, created.jitter, created.payload) == ("Europe/Berlin", "2s", b"hi")
    assert created.next_tick is not None and created.owner == "local"
    assert (await client.schedule_info("s")) == created
    changed = await client.update_schedule(msgspec.structs.replace(created, kind="other"))
    assert changed.kind == "other" and changed.next_tick == created.next_tick
    assert (await client.pause_schedule("s")).paused
    assert not (await client.resume_schedule("s")).paused
    assert [i.name for i in (await client.list_schedules()).items] == ["s"]
    await client.delete_schedule("s")
    with pytest.raises(InvalidOption) as missing:
        await client.schedule_info("s")
    assert missing.value.message == "schedule does not exist; no such schedule named 's'"
    with pytest.raises(InvalidOption) as invalid:
        await client.create_schedule("bad", "* * * * *", "sq", time_zone="Nowhere")
    assert invalid.value.message == "time zone is invalid; 'Nowhere' is not a known IANA time zone"


async def test_the_blocking_client_has_them_too(endpoint: str) -> None:
    def work() -> list[str]:
        with Client(endpoint) as blocking:
            blocking.create_queue("bq")
            blocking.create_schedule("b", "0 * * * *", "bq")
            return [i.name for i in blocking.list_schedules().items]

    assert await asyncio.to_thread(work) == ["b"]


def test_cli_schedules(cli_endpoint: str) -> None:
    e = cli_endpoint
    ok(cli(e, "create", "cli-sq"))
    created = ok(cli(e, "schedules", "create", "cli-s", "--cron", "0 3 * * *", "--queue", "cli-sq",
                     "--time-zone", "Europe/Berlin", "--payload", "hello", "--catch-up", "skip"))  # fmt: skip
    assert (created["cron"], created["catch_up"], created["payload"]) == ("0 3 * * *", "skip", "aGVsbG8=")
    updated = ok(cli(e, "schedules", "update", "cli-s", "--jitter", "30s"))
    assert (updated["jitter"], updated["cron"], updated["payload"]) == ("30s", "0 3 * * *", "aGVsbG8=")
    assert ok(cli(e, "schedules", "pause", "cli-s"))["paused"] is True
    assert "paused" not in ok(cli(e, "schedules", "resume", "cli-s"))
    assert [s["name"] for s in ok(cli(e, "schedules", "list"))["items"]] == ["cli-s"]
    assert ok(cli(e, "schedules", "info", "cli-s"))["time_zone"] == "Europe/Berlin"
    assert ok(cli(e, "schedules", "delete", "cli-s")) == {"code": 200}
    missing = cli(e, "schedules", "info", "cli-s")
    assert missing.returncode == 1
    assert missing.stderr == "querator: 400 schedule does not exist; no such schedule named 'cli-s'\n"
    bad = cli(e, "schedules", "create", "x", "--cron", "* * *", "--queue", "cli-sq")
    assert bad.returncode == 1 and "cron is invalid; '* * *' has 3 fields" in bad.stderr
