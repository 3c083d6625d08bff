"""The schedules API (docs/schedules.md): schedules.create, update, info, list, delete, pause and resume,
checked completely before storage is touched, and the produce request of one tick.

Schedules live in the store, which every node of a cluster shares (Cassandra), so any node answers
these routes itself; the node that owns a schedule on the ring fires it (``querator.schedules``). The
node that changed one tells the owner (``schedules.refresh``), whose scheduler then reads the schedules
again at once; an owner that cannot be told sees the change at its next reading, within ``RELOAD_US``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from querator.clock import MICROS, Clock, to_datetime
from querator.duration import MICROSECOND, DurationError, format_micros, parse_duration
from querator.errors import InvalidOption, QueratorError, no_such_queue
from querator.names import check_new_name_characters
from querator.schedules import ALL, CATCH_UP_POLICIES, MAX_CATCH_UP, ONE, RELOAD_US, Scheduler, tick_time
from querator.service._validation import check_stored_name, has_space
from querator.storage.base import LIST_PAGE_BYTES
from querator.storage.schedules import ScheduleRecord, ScheduleStore
from querator.tenancy import RequestContext
from querator.tenancy import permissions as perm
from querator.wire import messages as m

MAX_SCHEDULE_NAME: Final = 96
"""Characters of a schedule name: its ticks' dedup ids (name, '@', a 20-character time) stay within the
128 characters of a dedup id."""
DEFAULT_CATCH_UP_LIMIT: Final = 100
MAX_JITTER_US: Final = 24 * 3600 * MICROS
DEFAULT_SCHEDULES_LIMIT: Final = 100
MAX_SCHEDULES_LIMIT: Final = 1000
TELL_TIMEOUT_S: Final = RELOAD_US / MICROS
"""How long a change waits for the schedule's owner to hear of it: no longer than the owner takes to
read the schedules again by itself."""
FIRE_TIMEOUT: Final = "30s"
"""The request timeout of a tick's produce: a tick that could not be stored in time is tried again."""

log = logging.getLogger(__name__)

QueueExists = Callable[[str], Awaitable[bool]]
OwnerOf = Callable[[str], str]
TellOwner = Callable[[str], Awaitable[None]]
"""Tells the member that fires a schedule, when it is another, that the schedule changed."""
Authorize = Callable[[RequestContext, str, str], Awaitable[None]]
"""403 unless the caller of a context holds a permission in the namespace of a queue ("": ``_system``)."""


class Schedules:
    """The schedules routes over a store; ``scheduler`` hears of every change made here, and so does the
    schedule's owner through ``tell_owner``."""

    def __init__(
        self,
        store: ScheduleStore,
        clock: Clock,
        queue_exists: QueueExists,
        owner_of: OwnerOf,
        scheduler: Scheduler,
        authorize: Authorize | None = None,
        tell_owner: TellOwner | None = None,
    ) -> None:
        self._store = store
        self._authorize = authorize
        self._owner_of = owner_of
        self._clock = clock
        self._queue_exists = queue_exists
        self._scheduler = scheduler
        self._tell_owner = tell_owner

    async def create(self, ctx: RequestContext, info: m.ScheduleInfo) -> m.ScheduleInfo:
        check_new_schedule_name(info.name)
        now = self._clock.now()
        record = await self._definition(info, ScheduleRecord(name=info.name, start=now, created_at=now))
        await self._check_queue(ctx, record.queue)
        record.updated_at = now
        if not await self._store.add_schedule(record):
            raise InvalidOption(f"invalid schedule; '{info.name}' already exists")
        await self._changed(record.name)
        return self._info(record)

    async def update(self, ctx: RequestContext, info: m.ScheduleInfo) -> m.ScheduleInfo:
        """Replaces the definition; the paused state and the last tick stay. A new calendar (cron or
        time zone) starts from now: no tick before the update fires under it."""
        current = await self._existing(ctx, info.name, perm.QUEUE_UPDATE)
        record = await self._definition(info, dataclasses.replace(current))
        await self._check_queue(ctx, record.queue)
        now = self._clock.now()
        if (record.cron, record.time_zone) != (current.cron, current.time_zone):
            record.start = max(now, current.start)
        record.updated_at = max(now, current.updated_at + 1)
        return await self._replace(record)

    async def info(self, ctx: RequestContext, req: m.SchedulesRequest) -> m.ScheduleInfo:
        return self._info(await self._existing(ctx, req.name, perm.QUEUE_STATS))

    async def list(self, ctx: RequestContext, req: m.SchedulesListRequest) -> m.SchedulesListResponse:
        if req.limit < 0:
            raise InvalidOption("limit is invalid; limit cannot be negative")
        if req.limit > MAX_SCHEDULES_LIMIT:
            raise InvalidOption(f"limit is invalid; cannot be greater than {MAX_SCHEDULES_LIMIT}")
        await self._check(ctx, "", perm.QUEUE_LIST)  # schedules of every queue: a _system matter
        records = await self._store.list_schedules(req.pivot, req.limit or DEFAULT_SCHEDULES_LIMIT)
        return m.SchedulesListResponse(items=[self._info(r) for r in _page(records)])

    async def delete(self, ctx: RequestContext, req: m.SchedulesRequest) -> None:
        await self._existing(ctx, req.name, perm.QUEUE_UPDATE)
        if not await self._store.delete_schedule(req.name):
            raise _missing(req.name)
        await self._changed(req.name)

    async def pause(self, ctx: RequestContext, req: m.SchedulesRequest) -> m.ScheduleInfo:
        current = await self._existing(ctx, req.name, perm.QUEUE_UPDATE)
        if current.paused:
            return self._info(current)
        return await self._replace(
            dataclasses.replace(current, paused=True, updated_at=self._updated(current))
        )

    async def resume(self, ctx: RequestContext, req: m.SchedulesRequest) -> m.ScheduleInfo:
        """Unpauses; ticks that came while paused never fire (the schedule starts again from now)."""
        current = await self._existing(ctx, req.name, perm.QUEUE_UPDATE)
        if not current.paused:
            return self._info(current)
        now = self._clock.now()
        resumed = dataclasses.replace(
            current, paused=False, start=max(now, current.start), updated_at=self._updated(current)
        )
        return await self._replace(resumed)

    async def refresh(self, ctx: RequestContext, req: m.SchedulesRequest) -> None:
        """Another member changed the schedule ``req.name``, which this one fires: read the schedules
        again now. Harmless to call: the scheduler only reads what is stored."""
        check_new_schedule_name(req.name)  # every stored name passes it
        await self._check(ctx, "", perm.QUEUE_UPDATE)  # a client's call; a member's forward passes
        self._scheduler.changed()

    async def delete_of_queue(self, queue: str) -> int:
        """Deletes the schedules whose ticks go to ``queue``, which was deleted: left, they would fire
        into whoever's queue of that name comes next, another tenant's included. How many."""
        deleted: list[str] = []
        pivot = ""
        while True:
            page = await self._store.list_schedules(pivot, MAX_SCHEDULES_LIMIT)
            for record in page:
                if (
                    record.name > pivot
                    and record.queue == queue
                    and await self._store.delete_schedule(record.name)
                ):
                    deleted.append(record.name)
            if len(page) < MAX_SCHEDULES_LIMIT:
                break
            pivot = page[-1].name  # inclusive: skipped above
        for name in deleted:
            await self._changed(name)
        return len(deleted)

    async def _changed(self, name: str) -> None:
        """A schedule changed here: the schedulers of this member and of its owner check their slots now;
        an owner that cannot be told checks them within ``RELOAD_US`` anyway."""
        self._scheduler.changed()
        if self._tell_owner is None:
            return
        try:
            await self._tell_owner(name)
        except QueratorError as e:
            log.warning(
                "schedule %s changed, but its owner could not be told (it sees the change at its next "
                "reading of the schedules): %s",
                name,
                e.message,
            )

    async def _check(self, ctx: RequestContext, queue: str, permission: str) -> None:
        """With tenancy: managing a schedule is changing what flows into its queue (``queue.update``),
        reading one is the queue's ``queue.stats``, listing them all ``queue.list`` in ``_system``."""
        if self._authorize is not None:
            await self._authorize(ctx, queue, permission)

    def _updated(self, current: ScheduleRecord) -> int:
        return max(self._clock.now(), current.updated_at + 1)

    async def _existing(self, ctx: RequestContext, name: str, permission: str) -> ScheduleRecord:
        """The schedule ``name``, once the caller holds ``permission`` for its queue. One that does not
        exist is checked as a queue that does not exist (in ``_system``): a caller refused there gets
        the same 403 whether the schedule exists or not (docs/tenancy.md, "Boundaries between
        namespaces")."""
        check_schedule_name(name)
        record = await self._store.get_schedule(name)
        await self._check(ctx, record.queue if record is not None else "", permission)
        if record is None:
            raise _missing(name)
        return record

    async def _check_queue(self, ctx: RequestContext, queue: str) -> None:
        """The queue a schedule is to produce into: the caller's ``queue.update`` there first, then
        that it exists, so a caller learns nothing of a queue it may not change."""
        await self._check(ctx, queue, perm.QUEUE_UPDATE)
        if not await self._queue_exists(queue):
            raise no_such_queue(queue)

    async def _replace(self, record: ScheduleRecord) -> m.ScheduleInfo:
        if not await self._store.update_schedule(record):
            raise _missing(record.name)
        await self._changed(record.name)
        stored = await self._store.get_schedule(record.name)
        return self._info(stored or record)

    async def _definition(self, info: m.ScheduleInfo, record: ScheduleRecord) -> ScheduleRecord:
        """``record`` with the definition ``info`` gives, once all of it is valid (but for whether its queue
        exists: ``_check_queue``, after the caller's permission)."""
        record.cron = info.cron.strip()
        record.time_zone = info.time_zone or "UTC"
        if not record.cron:
            raise InvalidOption("cron is invalid; cannot be empty")
        calendar = self._scheduler.calendar(record)  # InvalidOption for a bad expression or zone
        if calendar.next_after(self._clock.now()) is None:
            raise InvalidOption(f"cron is invalid; '{record.cron}' never fires")
        record.catch_up = info.catch_up or ONE
        if record.catch_up not in CATCH_UP_POLICIES:
            raise InvalidOption(
                f"catch up is invalid; '{info.catch_up}' is not one of {', '.join(CATCH_UP_POLICIES)}"
            )
        record.catch_up_limit = _catch_up_limit(record.catch_up, info.catch_up_limit)
        record.jitter = _jitter(info.jitter)
        record.encoding, record.kind, record.reference = info.encoding, info.kind, info.reference
        record.payload = info.payload
        if not info.queue_name:
            raise InvalidOption("queue name is invalid; queue name cannot be empty")
        check_stored_name(info.queue_name)
        record.queue = info.queue_name  # checked by ``_check_queue``, after the caller's permission
        return record

    def _info(self, r: ScheduleRecord) -> m.ScheduleInfo:
        next_tick = None if r.paused else self._scheduler.calendar(r).next_after(max(r.start, r.last_tick))
        return m.ScheduleInfo(
            name=r.name,
            cron=r.cron,
            time_zone=r.time_zone,
            queue_name=r.queue,
            catch_up=r.catch_up,
            catch_up_limit=r.catch_up_limit,
            jitter=format_micros(r.jitter) if r.jitter else "",
            paused=r.paused,
            encoding=r.encoding,
            kind=r.kind,
            reference=r.reference,
            payload=r.payload,
            created_at=to_datetime(r.created_at),
            updated_at=to_datetime(r.updated_at),
            last_tick=to_datetime(r.last_tick) if r.last_tick else None,
            next_tick=to_datetime(next_tick) if next_tick else None,
            owner=self._owner_of(r.name),
        )


def _page(records: list[ScheduleRecord]) -> list[ScheduleRecord]:
    """The first of ``records`` whose payloads fit in ``LIST_PAGE_BYTES`` (the first always): a list of
    templates must not hold a thousand large payloads (docs/extensions.md, "Storage lists")."""
    size = 0
    for n, record in enumerate(records):
        size += len(record.payload)
        if n and size > LIST_PAGE_BYTES:
            return records[:n]
    return records


def check_schedule_name(name: str) -> None:
    if not name.strip():
        raise InvalidOption("schedule name is invalid; cannot be empty")


def check_new_schedule_name(name: str) -> None:
    check_schedule_name(name)
    if len(name) > MAX_SCHEDULE_NAME:
        raise InvalidOption(
            f"schedule name is invalid; cannot be greater than '{MAX_SCHEDULE_NAME}' characters"
        )
    if has_space(name):
        raise InvalidOption(f"schedule name is invalid; '{name}' cannot contain whitespace")
    check_new_name_characters("schedule name", name)


def _missing(name: str) -> InvalidOption:
    return InvalidOption(f"schedule does not exist; no such schedule named '{name}'")


def _catch_up_limit(policy: str, limit: int) -> int:
    if limit < 0:
        raise InvalidOption(f"catch up limit is invalid; cannot be negative but {limit} was given")
    if limit and policy != ALL:
        raise InvalidOption(f"catch up limit is invalid; only catch up 'all' takes a limit, not '{policy}'")
    if limit > MAX_CATCH_UP:
        raise InvalidOption(f"catch up limit is invalid; cannot be greater than {MAX_CATCH_UP}")
    return limit or (DEFAULT_CATCH_UP_LIMIT if policy == ALL else 0)


def _jitter(text: str) -> int:
    """A schedule's jitter in microseconds (0 when not given)."""
    if not text:
        return 0
    try:
        ns = parse_duration(text)
    except DurationError as e:
        raise InvalidOption(f"jitter is invalid; {e} - expected format: 500ms, 30s or 5m") from None
    if ns < 0:
        raise InvalidOption(f"jitter is invalid; cannot be negative but '{text}' was given")
    if ns > MAX_JITTER_US * MICROSECOND:
        raise InvalidOption(f"jitter is invalid; cannot be greater than '{format_micros(MAX_JITTER_US)}'")
    return ns // MICROSECOND


def tick_produce(record: ScheduleRecord, tick: int) -> m.QueueProduceRequest:
    """The produce of one tick: the template, with a dedup id of schedule and tick time, so a tick fired
    twice (by two owners, or again after a crash) is stored once; and, unless the template names one, that
    id as the item's reference, so a consumer can tell which tick an item is for."""
    tick_id = f"{record.name}@{tick_time(tick)}"
    item = m.QueueProduceItem(
        encoding=record.encoding,
        kind=record.kind,
        reference=record.reference or tick_id,
        bytes=record.payload,
        dedup_id=tick_id,
    )
    return m.QueueProduceRequest(queue_name=record.queue, request_timeout=FIRE_TIMEOUT, items=[item])
