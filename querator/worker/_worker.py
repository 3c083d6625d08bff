"""``Worker``: the registry of tasks and the process that runs them, with its warm shutdown."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import signal
import threading
from collections.abc import AsyncGenerator, Callable, Collection, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar, overload

from querator.client import DEFAULT_ENDPOINT, AsyncClient, Duration, LoopThread, go_duration, seconds_of
from querator.errors import InvalidOption
from querator.wire import messages as m
from querator.worker._envelope import pack
from querator.worker._observe import Metrics
from querator.worker._priority import check_level, level_queues
from querator.worker._rate import rate_limit_of
from querator.worker._runner import QueueRunner, Reservations, Runtime
from querator.worker._serializer import JsonSerializer, Serializer
from querator.worker._settle import Settler
from querator.worker._slots import Slots
from querator.worker._task import Leaser, Task, TaskOptions
from querator.worker.backoff import Policy, exponential

log = logging.getLogger("querator.worker")

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

EXIT_INTERRUPTED = 130
"""Exit status after a second SIGINT/SIGTERM (128 + SIGINT, the shell's convention)."""
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_RETRY = exponential(first="1s", cap="10m")


def default_prefetch(concurrency: int) -> int:
    """Items held ahead when the Worker names no ``prefetch``: as many as its slots, so that its leases
    come in batches rather than one item per freed slot, while a kill -9 strands at most as many unrun
    items as were running (docs/adr/0067)."""
    return concurrency


def check_prefetch(prefetch: int | None) -> None:
    if prefetch is not None and prefetch < 0:
        raise ValueError("worker: prefetch cannot be negative")


class Worker:
    """Tasks bound to queues, and the runtime that leases and runs their items.

    Args:
        endpoint: the Querator server (default: ``QUERATOR_ENDPOINT``, else ``http://localhost:2319``).
        api_key: its API key, if it needs one (default: ``QUERATOR_API_KEY``).
        concurrency: items run at once in this process, all tasks together (``run`` may override it).
        prefetch: items leased ahead of the running ones, held (renewed) until a slot frees, so that a
            slot freed starts the next item without waiting for a lease; a warm stop gives them back.
            Default ``concurrency`` (``default_prefetch``); 0 leases only what can run
            (docs/adr/0053).
        serializer: how arguments become payloads (``JsonSerializer`` by default; any ``Serializer``).
        protobuf: speak binary protobuf to the server instead of JSON.
        reach_owners: send leases, completes and enqueues straight to the cluster member owning their
            partitions (``AsyncClient``'s ``reach_owners``).
        lowest_first_every: with priority levels, every n-th lease of a queue takes its lowest level
            first, so that low items still run under a constant stream of higher ones (0, the default:
            strictly by level, and a low item may wait forever).
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        api_key: str | None = None,
        concurrency: int = 16,
        prefetch: int | None = None,
        serializer: Serializer | None = None,
        protobuf: bool = False,
        reach_owners: bool = False,
        lowest_first_every: int = 0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("worker: concurrency must be at least 1")
        check_prefetch(prefetch)
        self.prefetch = prefetch
        if lowest_first_every < 0:
            raise ValueError("worker: lowest_first_every cannot be negative")
        self.lowest_first_every = lowest_first_every
        self.endpoint = endpoint or os.environ.get("QUERATOR_ENDPOINT") or DEFAULT_ENDPOINT
        self.concurrency = concurrency
        self.serializer = serializer or JsonSerializer()
        self.tasks: dict[str, Task[..., Any]] = {}
        self.schedules: dict[str, m.ScheduleInfo] = {}
        """The schedules of ``periodic`` tasks, by name: put on the server by ``run``."""
        self.metrics = Metrics()
        self._api_key = api_key if api_key is not None else os.environ.get("QUERATOR_API_KEY")
        self._protobuf = protobuf
        self._reach_owners = reach_owners
        self._clients: dict[asyncio.AbstractEventLoop, AsyncClient] = {}
        self._closers: dict[asyncio.AbstractEventLoop, AsyncGenerator[None, None]] = {}
        self._ensured: dict[asyncio.AbstractEventLoop, set[str]] = {}
        """The queues each loop's client has made sure of; dropped with the client (its id may be reused)."""
        self.leasers: dict[str, Leaser] = {}
        """How the items of a queue (by name) are leased, when not by ``AsyncClient.lease``."""
        self._stop: asyncio.Event | None = None
        self._signals = 0
        self._blocking: LoopThread | None = None
        self._blocking_lock = threading.Lock()

    # -- declaring tasks ------------------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        queue: str = "",
        name: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        retry: Policy = DEFAULT_RETRY,
        lease_timeout: Duration | None = None,
        timeout: Duration | None = None,
        concurrency: int | None = None,
        permanent: Collection[type[BaseException]] = (),
        create_queue: bool = False,
        dead_queue: str | None = None,
        serializer: Serializer | None = None,
        expire_timeout: Duration | None = None,
        rate_limit: str | None = None,
        rate_key: Callable[..., str] | None = None,
        rate_scope: str = "process",
        priority: str | None = None,
        partitions: int | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        queue: str = "",
        name: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        retry: Policy = DEFAULT_RETRY,
        lease_timeout: Duration | None = None,
        timeout: Duration | None = None,
        concurrency: int | None = None,
        permanent: Collection[type[BaseException]] = (),
        create_queue: bool = False,
        dead_queue: str | None = None,
        serializer: Serializer | None = None,
        expire_timeout: Duration | None = None,
        rate_limit: str | None = None,
        rate_key: Callable[..., str] | None = None,
        rate_scope: str = "process",
        priority: str | None = None,
        partitions: int | None = None,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Registers a function (sync or async) as a task, as a decorator.

        Args:
            queue: the queue its items go to (default: the task's name). Several tasks may share one.
            name: the task's name, stored as each item's ``kind`` (default: the function's qualified name).
            max_attempts: runs before a failing item is dead-lettered (0: no limit).
            retry: the back-off after a failure (``querator.worker.backoff``; default exponential, 1s to
                10m): the item comes back at ``retry_at``.
            lease_timeout: the queue's lease timeout when ``create_queue`` makes it, and each renewal's;
                leases are renewed while the task runs, so it bounds only how soon a crashed worker's
                items run again.
            timeout: a run that takes longer fails (and is retried).
            concurrency: runs of this task at once in this process (below the worker's own limit).
            permanent: exceptions that dead-letter the item at once, as ``Permanent`` does.
            create_queue: create the queue (and its dead queue) when missing, with ``lease_timeout``,
                ``max_attempts`` and ``dead_queue``.
            dead_queue: for ``create_queue``: the dead-letter queue (default ``<queue>-dead``; "" none).
            serializer: this task's, instead of the worker's.
            expire_timeout: for ``create_queue``: how long an item may wait once it can be leased (a
                delayed or retried item's counts from when it is due); default 60 times the lease timeout.
            rate_limit: at most this many starts of the task in this process, ``"<n>/s"``, ``"<n>/m"``
                or ``"<n>/h"``, evenly spaced (docs/worker.md, "Rate limits").
            rate_key: with ``rate_limit``, a function of the task's arguments whose result is the key
                the limit applies to on its own (a customer, an API host); default one key for all.
            rate_scope: ``"process"`` (the default): ``rate_limit`` holds in each worker process;
                ``"cluster"``: it holds across every worker of the cluster, kept by the server
                (docs/worker.md, "Rate limits").
            priority: give the task priority levels (``"high"``, ``"normal"``, ``"low"``), this one
                the level of an ``enqueue`` that names none: each level is a queue, and a worker with
                free slots leases the higher levels first (docs/worker.md, "Priorities").
            partitions: for ``create_queue``: the queue's partitions (each level queue's, with
                ``priority``; default the server's, 1). A queue that exists keeps its own.
        """
        limiter = rate_limit_of(rate_limit, rate_key, rate_scope, "worker")
        if priority is not None:
            check_level(priority)
        # The upper bound is the server's, told when create_queue sends the count.
        if partitions is not None and partitions < 1:
            raise ValueError(f"worker: partitions must be at least 1, not {partitions}")

        def register(function: Callable[P, R]) -> Task[P, R]:
            task_name = name or f"{function.__module__}.{function.__qualname__}"
            if task_name in self.tasks:
                raise ValueError(f"worker: a task named {task_name!r} is registered already")
            if max_attempts < 0 or (concurrency is not None and concurrency < 1):
                raise ValueError("worker: max_attempts cannot be negative, concurrency must be at least 1")
            target = queue or task_name
            options = TaskOptions(
                name=task_name,
                queue=target,
                max_attempts=max_attempts,
                retry=retry,
                lease_timeout="" if lease_timeout is None else go_duration(lease_timeout),
                expire_timeout="" if expire_timeout is None else go_duration(expire_timeout),
                timeout_s=None if timeout is None else seconds_of(timeout),
                concurrency=concurrency,
                permanent=tuple(permanent),
                create_queue=create_queue,
                dead_queue=f"{target}-dead" if dead_queue is None else dead_queue,
                rate_limit=limiter,
                rate_key=rate_key,
                rate_scope=rate_scope,
                priority=priority,
                partitions=partitions,
            )
            task = Task(self, function, options, serializer or self.serializer)
            self.tasks[task_name] = task
            return task

        return register if fn is None else register(fn)

    def periodic(
        self,
        cron: str,
        /,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        schedule: str | None = None,
        time_zone: str = "",
        catch_up: str = "",
        jitter: Duration | None = None,
        create_queue: bool = True,
        **options: Any,
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Registers a task, as ``task`` does, that a server-side cron schedule (docs/schedules.md) enqueues
        at each tick, as ``task(*args, **kwargs)``. ``run`` creates the schedule, or replaces its
        definition (``AsyncClient.put_schedule``), before it leases: the code declares it, the server
        fires it once per tick whether or not a worker is up. A run's tick is in its item's reference,
        ``<schedule>@<tick time>`` (``current_item()``).

        Args:
            cron: 5 fields (minute hour day month weekday), or 6 with seconds first.
            args, kwargs: the call each tick enqueues (checked against the function now).
            schedule: the schedule's name (default: the task's name).
            time_zone, catch_up, jitter: the schedule's (default UTC, ``one``, none).
            create_queue: as for ``task``, but on by default: the schedule needs its queue.
            options: the other options of ``task`` (``queue``, ``max_attempts``, ``rate_limit``...).
        """

        def register(function: Callable[P, R]) -> Task[P, R]:
            task = self.task(create_queue=create_queue, **options)(function)
            call = dict(kwargs or {})
            task.signature.check(args, call)  # a call that cannot bind fails here, not at every tick
            info = m.ScheduleInfo(
                name=schedule or task.name,
                cron=cron,
                queue_name=task.options.queue_of(None),
                time_zone=time_zone,
                catch_up=catch_up,
                jitter="" if jitter is None else go_duration(jitter),
                payload=pack(task.serializer, args, call, {}),
                kind=task.name,
                encoding=task.serializer.content_type,
            )
            if info.name in self.schedules:
                raise ValueError(f"worker: a schedule named {info.name!r} is declared already")
            self.schedules[info.name] = info
            return task

        return register

    def connect(self, endpoint: str, *, api_key: str | None = None) -> None:
        """Points the worker and its tasks' ``enqueue`` at ``endpoint`` with ``api_key`` (from a
        framework's settings, or a test's node). Call it before the first ``enqueue`` or ``run``: a loop
        that already has a client keeps it until ``close``."""
        self.endpoint = endpoint
        self._api_key = api_key

    # -- the client of enqueue and of the runtime ------------------------------------------------------------

    async def client_for(self, task: Task[..., Any] | None = None) -> AsyncClient:
        """The client of the running loop (an aiohttp session belongs to one loop), with ``task``'s queue
        made first if the task asks for it."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = AsyncClient(
                self.endpoint, api_key=self._api_key, protobuf=self._protobuf, reach_owners=self._reach_owners
            )
            # Closed with the loop: asyncio.run() ends by closing the async generators the loop
            # started, so a script that enqueues in asyncio.run() leaves no session open.
            closer = self._closers[loop] = _closed_with_loop(self, loop, client)
            await anext(closer)
        if task is not None and task.options.create_queue:
            ensured = self._ensured.setdefault(loop, set())
            if task.options.queue not in ensured:
                await _ensure_queues(client, task.options)
                ensured.add(task.options.queue)
        return client

    async def close(self) -> None:
        """Closes the running loop's client (``enqueue`` opens one per event loop; the loop's end closes
        it too, when it is run by ``asyncio.run``)."""
        loop = asyncio.get_running_loop()
        closer = self._closers.pop(loop, None)
        if closer is not None:
            await closer.aclose()

    def block_on(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` (an enqueue) on the worker's loop thread for a caller without a running loop, and
        returns its result; the thread starts with the first call and serves the later ones.

        Raises:
            RuntimeError: the caller runs on an event loop (blocking it would stall everything on it).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError("worker: enqueue_sync would block this event loop; await enqueue() instead")
        with self._blocking_lock:
            if self._blocking is None:
                self._blocking = LoopThread("querator worker enqueue")
                # Closed at exit while the thread still runs: a session left to the interpreter's
                # finalization is reported unclosed on stderr.
                atexit.register(self.close_sync)
            blocking = self._blocking
        return blocking.run(coro)

    def close_sync(self) -> None:
        """Closes the client of ``enqueue_sync`` and stops its thread (a later call starts them again).
        The process's exit does it too."""
        with self._blocking_lock:
            blocking, self._blocking = self._blocking, None
        if blocking is not None:
            atexit.unregister(self.close_sync)
            blocking.close(self.close())

    # -- running ------------------------------------------------------------------------------------------

    def selected(self, queues: Collection[str] | None) -> dict[str, list[Task[..., Any]]]:
        """The tasks of each queue to run: every queue, or those of ``queues``.

        Raises:
            ValueError: no task at all, or a named queue no task uses.
        """
        by_queue: dict[str, list[Task[..., Any]]] = {}
        for task in self.tasks.values():
            by_queue.setdefault(task.options.queue, []).append(task)
        if queues:
            unknown = set(queues) - set(by_queue)
            if unknown:
                raise ValueError(f"worker: no task uses the queue(s) {', '.join(sorted(unknown))}")
            by_queue = {q: t for q, t in by_queue.items() if q in queues}
        if not by_queue:
            raise ValueError("worker: no tasks registered")
        return by_queue

    async def run(
        self,
        queues: Collection[str] | None = None,
        *,
        concurrency: int | None = None,
        metrics_port: int | None = None,
        handle_signals: bool = True,
        prefetch: int | None = None,
    ) -> None:
        """Leases and runs items of the tasks' queues (or of ``queues``) until ``stop()`` or a signal;
        ``concurrency`` and ``prefetch`` override the Worker's.

        SIGTERM or SIGINT (with ``handle_signals``) stops it warmly: no more leases; what is running
        runs to its end, renewed meanwhile, and is settled; what was held ahead is given back to its
        queue unrun; then this returns. A second signal exits the process at once (status 130); what was
        in flight comes back when its lease ends.
        """
        by_queue = self.selected(queues)
        check_prefetch(prefetch)
        limit = concurrency or self.concurrency
        chosen = prefetch if prefetch is not None else self.prefetch
        ahead = default_prefetch(limit) if chosen is None else chosen
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        client = await self._prepared(by_queue)
        if metrics_port is not None:
            self.metrics.serve(metrics_port)
        pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="querator-task")
        rt = Runtime(
            client,
            Settler(client),
            self.metrics,
            Reservations(limit + ahead),
            Slots(limit),
            pool,
            lowest_first_every=self.lowest_first_every,
            leasers=self.leasers,
        )
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._signalled, sig)
        runners = [QueueRunner(rt, q, t) for q, t in by_queue.items()]
        leasing = [asyncio.create_task(r.lease_loop()) for r in runners for _ in range(r.leasers)]
        log.info("worker started: queues %s, concurrency %d, prefetch %d", ", ".join(by_queue), limit, ahead)
        try:
            stop = asyncio.create_task(self._stop.wait())
            done, _ = await asyncio.wait([stop, *leasing], return_when=asyncio.FIRST_COMPLETED)
            for ended in done - {stop}:
                ended.result()  # a lease loop ends only by failing: raise why
            log.info("worker stopping: finishing %d items in flight", len(rt.runs))
        finally:
            await self._wind_down(rt, leasing, pool)
            if handle_signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
            await self.close()
            self.metrics.stop()
            log.info("worker stopped")

    async def _prepared(self, by_queue: dict[str, list[Task[..., Any]]]) -> AsyncClient:
        """The loop's client, once the queues that ask for it are made and the schedules of the
        periodic tasks among them are on the server."""
        client = await self.client_for()
        for tasks in by_queue.values():
            for task in tasks:
                await self.client_for(task)  # create_queue
        for info in self.schedules.values():
            if info.queue_name in by_queue:
                await client.put_schedule(info)
        return client

    @staticmethod
    async def _wind_down(rt: Runtime, leasing: list[asyncio.Task[None]], pool: ThreadPoolExecutor) -> None:
        """No more leases; the runs in flight end (renewed meanwhile) and are settled, the items held
        ahead and those waiting for a rate limit's slot given back; then renewal stops."""
        rt.stopping.set()
        rt.running.stop()
        for loop_task in leasing:
            loop_task.cancel()
        await asyncio.gather(*leasing, return_exceptions=True)
        while rt.runs:
            await asyncio.gather(*list(rt.runs), return_exceptions=True)
        for renewal in list(rt.renewals):
            renewal.cancel()
        await asyncio.gather(*list(rt.renewals), return_exceptions=True)
        pool.shutdown(wait=False, cancel_futures=True)

    async def stopped(self) -> None:
        """Returns once the running worker is told to stop warmly (never, while it is not running): what
        waits for a chance to run (a durable step's limits) gives its work back instead of holding the
        stop up."""
        await (self._stop or asyncio.Event()).wait()

    def stop(self) -> None:
        """Stops ``run`` warmly (see ``run``); call it from the loop's thread."""
        if self._stop is not None:
            self._stop.set()

    def _signalled(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info("%s: stopping warmly (again to exit at once)", sig.name)
            self.stop()
            return
        log.warning("%s again: exiting at once; items in flight come back when their leases end", sig.name)
        logging.shutdown()
        os._exit(EXIT_INTERRUPTED)


async def _closed_with_loop(
    worker: Worker, loop: asyncio.AbstractEventLoop, client: AsyncClient
) -> AsyncGenerator[None, None]:
    """Yields once, and closes ``client`` when closed: by ``Worker.close`` or by the loop's shutdown."""
    try:
        yield
    finally:
        worker._clients.pop(loop, None)
        worker._closers.pop(loop, None)
        worker._ensured.pop(loop, None)
        await client.close()


async def _ensure_queues(client: AsyncClient, options: TaskOptions) -> None:
    """Creates the task's dead queue and queue (its level queues, with ``priority``) where missing (found
    by ``queue_info``: "exists" is not told apart from other refusals by its message)."""
    lease_timeout = options.lease_timeout or "1m"
    if options.dead_queue:
        await _ensure(client, options.dead_queue, lease_timeout=lease_timeout)
    for queue in [options.queue] if options.priority is None else level_queues(options.queue):
        await _ensure(
            client,
            queue,
            lease_timeout=lease_timeout,
            expire_timeout=options.expire_timeout or None,
            max_attempts=options.max_attempts,
            dead_queue=options.dead_queue,
            partitions=options.partitions,
        )


async def _ensure(client: AsyncClient, name: str, **settings: Any) -> None:
    try:
        await client.queue_info(name)
        return
    except InvalidOption:
        pass
    try:
        await client.create_queue(name, **settings)
    except InvalidOption:
        await client.queue_info(name)  # another process made it meanwhile; if not, this raises why
