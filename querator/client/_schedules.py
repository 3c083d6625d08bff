"""The schedules calls of ``AsyncClient`` (docs/schedules.md), mixed into it: one method per route."""

from __future__ import annotations

from querator.client._arguments import Duration, go_duration
from querator.client._caller import Caller
from querator.errors import InvalidOption
from querator.wire import messages as m


class ScheduleCalls(Caller):
    """Create, change, inspect and delete cron schedules; each tick produces one item into a queue."""

    async def create_schedule(
        self,
        info: m.ScheduleInfo | str,
        cron: str = "",
        queue_name: str = "",
        *,
        time_zone: str = "",
        catch_up: str = "",
        catch_up_limit: int = 0,
        jitter: Duration | None = None,
        payload: bytes | str = b"",
        kind: str = "",
        encoding: str = "",
        reference: str = "",
    ) -> m.ScheduleInfo:
        """Creates a schedule from a full ``ScheduleInfo``, or from a name, a cron expression, a queue and
        keyword settings (time zone UTC, catch-up ``one`` and no jitter unless given).

        Returns:
            The schedule as stored, with its next tick.

        Raises:
            InvalidOption: the name is taken or invalid, the expression, zone, policy or jitter is
                invalid, the queue does not exist.
        """
        if isinstance(info, str):
            info = m.ScheduleInfo(
                name=info,
                cron=cron,
                queue_name=queue_name,
                time_zone=time_zone,
                catch_up=catch_up,
                catch_up_limit=catch_up_limit,
                jitter=go_duration(jitter) if jitter is not None else "",
                payload=payload.encode() if isinstance(payload, str) else payload,
                kind=kind,
                encoding=encoding,
                reference=reference,
            )
        return await self.call("/v1/schedules.create", info, m.ScheduleInfo)

    async def update_schedule(self, info: m.ScheduleInfo) -> m.ScheduleInfo:
        """Replaces a schedule's definition (start from ``schedule_info()``); the paused state and the
        last tick stay, and a new cron expression or time zone starts from now.

        Raises:
            InvalidOption: unknown schedule, or an invalid setting as for ``create_schedule``.
        """
        return await self.call("/v1/schedules.update", info, m.ScheduleInfo, idempotent=True)

    async def put_schedule(self, info: m.ScheduleInfo) -> m.ScheduleInfo:
        """Creates the schedule, or replaces the definition of the one of that name as ``update_schedule``
        does (its paused state and last tick stay): for code that declares its schedules at each start.
        Whether it exists is asked of ``schedule_info``, not read from a refusal's message.

        Raises:
            InvalidOption: an invalid setting, as for ``create_schedule``.
        """
        try:
            await self.schedule_info(info.name)
        except InvalidOption:
            try:
                return await self.create_schedule(info)
            except InvalidOption as refused:
                try:  # made meanwhile by a process starting beside this one?
                    await self.schedule_info(info.name)
                except InvalidOption:
                    raise refused from None
        return await self.update_schedule(info)

    async def schedule_info(self, name: str) -> m.ScheduleInfo:
        """A schedule, with its last and next ticks.

        Raises:
            InvalidOption: unknown schedule (``schedule does not exist; ...``).
        """
        return await self.call(
            "/v1/schedules.info", m.SchedulesRequest(name=name), m.ScheduleInfo, idempotent=True
        )

    async def list_schedules(self, pivot: str = "", limit: int = 0) -> m.SchedulesListResponse:
        """Schedules by name, from the first name >= ``pivot``; ``limit`` 0 means the server's default
        (100)."""
        msg = m.SchedulesListRequest(pivot=pivot, limit=limit)
        return await self.call("/v1/schedules.list", msg, m.SchedulesListResponse, idempotent=True)

    async def delete_schedule(self, name: str) -> None:
        """Deletes a schedule; its items already produced stay in their queue.

        Raises:
            InvalidOption: unknown schedule.
        """
        await self.call("/v1/schedules.delete", m.SchedulesRequest(name=name), m.Reply)

    async def pause_schedule(self, name: str) -> m.ScheduleInfo:
        """Stops a schedule's ticks until ``resume_schedule``."""
        return await self.call(
            "/v1/schedules.pause", m.SchedulesRequest(name=name), m.ScheduleInfo, idempotent=True
        )

    async def resume_schedule(self, name: str) -> m.ScheduleInfo:
        """Starts a paused schedule again from now: ticks that came while it was paused never fire."""
        return await self.call(
            "/v1/schedules.resume", m.SchedulesRequest(name=name), m.ScheduleInfo, idempotent=True
        )
