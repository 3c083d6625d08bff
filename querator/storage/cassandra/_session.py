"""The connection: the driver's session with the prepared statements, and the bridge of its futures
into asyncio.

The driver has no asyncio API. Blocking calls (``Cql``) run on the store's worker threads; a run's
writes are awaited on the event loop through ``Connection.execute_async``, which settles an asyncio future
from the driver's callbacks and bounds the request with a timer of the loop rather than the driver's
(``bridge``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from cassandra import ConsistencyLevel
from cassandra.cluster import Cluster, Session
from cassandra.query import PreparedStatement

from querator.storage.base import RunCounters
from querator.storage.cassandra._errors import DRIVER_ERRORS, CassandraStorageError, storage_error
from querator.storage.cassandra._schema import create_schema
from querator.storage.cassandra._settings import CassandraSettings
from querator.storage.cassandra._statements import Statement

T = TypeVar("T")

Rows = list[dict[str, Any]]
FENCED_BY_QUORUM = frozenset({Statement.EPOCHS, Statement.CREATE_PARTITION, Statement.CLAIM_PARTITION})
"""The read of owner epochs and the claims it must meet, whatever the configured consistency."""
SERIAL = frozenset({ConsistencyLevel.SERIAL, ConsistencyLevel.LOCAL_SERIAL})


@dataclass(frozen=True, slots=True)
class Request:
    """A statement to send and its values; ``serial`` reads at ``LOCAL_SERIAL``."""

    statement: Statement
    params: tuple[Any, ...]
    serial: bool = False


Exchange = Generator[list[Request], list[Rows], T]
"""A conversation with Cassandra without I/O of its own: each ``yield`` hands over requests to send at
once and gets back their rows, in order; what it returns is its result (see ``Cql.exchange``)."""


class Connection:
    """The connection to Cassandra of one store, shared with its partitions; opened and closed by the
    store.

    Args:
        settings: How to connect and which keyspace to use.
        threads: The worker threads blocking driver calls run on.
        before_request: Called with each statement ``Cql.rows`` and ``Cql.applied`` send, before they
            send it (tests); it may raise, as a failed request does.
    """

    def __init__(
        self,
        settings: CassandraSettings,
        threads: ThreadPoolExecutor,
        before_request: Callable[[Statement], None] | None = None,
    ) -> None:
        self._settings = settings
        self._threads = threads
        self._before_request = before_request
        self._cluster: Cluster | None = None
        self.counters = RunCounters()
        """What the store's runs cost (the ``Cql`` counts every statement it sends into it)."""
        self.cql: Cql | None = None
        """The session and its statements while open."""

    async def open(self) -> None:
        """Connects, creates the keyspace and tables when missing, prepares every statement; idempotent.

        Raises:
            CassandraStorageError: Cassandra cannot be reached, or the schema is newer than ours.
        """
        if self.cql is not None:
            return
        loop = asyncio.get_running_loop()
        try:
            self.cql = await loop.run_in_executor(self._threads, self._connect)
        except DRIVER_ERRORS as e:
            raise storage_error(e) from e

    def _connect(self) -> Cql:
        cluster = Cluster(**self._settings.cluster_kwargs())
        try:
            session = cluster.connect()
            create_schema(session, self._settings)
            server_timed = cluster.connect()
            server_timed.use_client_timestamp = False
            cql = Cql(session, self._settings.keyspace, self.counters, self._before_request, server_timed)
            cql.prepare_all(self._settings.fence_level())
        except BaseException:
            cluster.shutdown()
            raise
        self._cluster = cluster
        return cql

    async def close(self) -> None:
        """Closes the connections (the store waits for running transactions first)."""
        cluster, self._cluster, self.cql = self._cluster, None, None
        if cluster is not None:
            await asyncio.get_running_loop().run_in_executor(self._threads, cluster.shutdown)

    def opened(self) -> Cql:
        """The open connection (blocking calls, worker threads only).

        Raises:
            CassandraStorageError: the store is not open.
        """
        if self.cql is None:
            raise CassandraStorageError("cassandra storage error; the store is not open")
        return self.cql

    async def execute_async(
        self, loop: asyncio.AbstractEventLoop, statement: Any, server_timed: bool = False
    ) -> list[dict[str, Any]]:
        """Sends ``statement`` and waits for its rows on ``loop`` without blocking a thread; with
        ``server_timed``, its write timestamp is the coordinator's (``Cql.server_timed``). The request
        fails with the driver's ``OperationTimedOut`` after ``request_timeout`` (``bridge``)."""
        cql = self.opened()
        session = cql.server_timed if server_timed else cql.session
        # No driver timer: the loop bounds the request instead (``bridge``), see ``_expire``.
        response = session.execute_async(statement, timeout=None)
        rows = await bridge(loop, response, self._settings.request_timeout)
        cql.count(statement, rows)
        return rows

    async def call(self, fn: Callable[[Cql], T], writes: bool = False) -> T:
        """Runs ``fn`` on a worker thread; if it ``writes``, a failure may leave its writes applied."""
        cql = self.opened()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._threads, fn, cql)
        except DRIVER_ERRORS as e:
            raise storage_error(e, sent=writes) from e
        except CassandraStorageError as e:
            # ``Cql`` classified the driver's error as a read's; a write's is decided here.
            if writes and isinstance(e.__cause__, DRIVER_ERRORS):
                raise storage_error(e.__cause__, sent=True) from e.__cause__
            raise


class Cql:
    """The session and its prepared statements; every call here is blocking (worker threads only)."""

    def __init__(
        self,
        session: Session,
        keyspace: str,
        counters: RunCounters,
        before_request: Callable[[Statement], None] | None = None,
        server_timed: Session | None = None,
    ) -> None:
        self.session = session
        self.server_timed = server_timed or session
        """A session whose writes take the coordinator's timestamp, not the driver's: for plain writes
        of cells that lightweight transactions also write (a tail's statics, ADR 0038). A coordinator
        gives Paxos ballots and its own timestamps from one increasing clock, so such writes are ordered
        as they were sent; the driver's clock, ahead of or behind Cassandra's, would let a write hide
        a later one of the other kind."""
        self.keyspace = keyspace
        self._before_request = before_request
        self.statements: dict[Statement, PreparedStatement] = {}
        self.fence_level: int | None = None
        """The consistency of a plain commit (``prepare_all``); None: the configured one."""
        self.counters = counters
        self._counting = threading.Lock()

    def prepare_all(self, fence_level: int | None = None) -> None:
        """Prepares every statement; those of ``FENCED_BY_QUORUM`` at ``fence_level`` (see
        ``CassandraSettings.fence_level``), the others at the configured consistency."""
        for statement in Statement:
            self.statements[statement] = prepared = self.session.prepare(statement.cql(self.keyspace))
            if statement in FENCED_BY_QUORUM and fence_level is not None:
                prepared.consistency_level = fence_level
        self.fence_level = fence_level

    def stmt(self, cql: Statement) -> PreparedStatement:
        return self.statements[cql]

    def rows(self, cql: Statement, params: Sequence[Any]) -> list[dict[str, Any]]:
        if self._before_request is not None:
            self._before_request(cql)
        return self.rows_statement(self.statements[cql].bind(params))

    def rows_statement(self, statement: Any) -> list[dict[str, Any]]:
        # No driver error is raised before the request exists: "no host available" is the future's too.
        return self.result(self.session.execute_async(statement), statement)

    def first(self, response: Any, statement: Any) -> dict[str, Any]:
        """The first row of a driver ``ResponseFuture`` (waits for it): a conditional write's verdict."""
        rows = self.result(response, statement)
        return rows[0] if rows else {"[applied]": False}

    def result(self, response: Any, statement: Any) -> list[dict[str, Any]]:
        """The rows of a driver ``ResponseFuture`` of ``statement`` (waits for it)."""
        try:
            rows = list(response.result())
        except DRIVER_ERRORS as e:
            raise storage_error(e) from e
        finally:
            finished(response)
        self.count(statement, rows)
        return rows

    def count(self, statement: Any, rows: Rows) -> None:
        """Counts an answered statement as a Paxos round or a plain one: a conditional write's answer
        has the ``[applied]`` column, a serial read asks for it (a statement given as a string, as
        tests send, asks for nothing)."""
        serial = getattr(statement, "consistency_level", None) in SERIAL
        paxos = serial or bool(rows and "[applied]" in rows[0])
        with self._counting:
            if paxos:
                self.counters.paxos += 1
            else:
                self.counters.plain += 1

    def applied(self, cql: Statement, params: Sequence[Any]) -> tuple[bool, dict[str, Any]]:
        if self._before_request is not None:
            self._before_request(cql)
        return self.applied_statement(self.statements[cql].bind(params))

    def applied_statement(self, statement: Any) -> tuple[bool, dict[str, Any]]:
        row = self.first(self.session.execute_async(statement), statement)
        return bool(row["[applied]"]), row

    def exchange(self, exchange: Exchange[T]) -> T:
        """Runs ``exchange``: sends each batch of its requests at once, waits for their rows and hands
        them back, until it returns."""
        try:
            requests = next(exchange)
            while True:
                statements = [self._bound(r) for r in requests]
                responses = [self.session.execute_async(s) for s in statements]
                requests = exchange.send(
                    [self.result(*sent) for sent in zip(responses, statements, strict=True)]
                )
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _bound(self, request: Request) -> Any:
        bound = self.statements[request.statement].bind(request.params)
        if request.serial:
            bound.consistency_level = ConsistencyLevel.LOCAL_SERIAL
        return bound


def finished(response: Any) -> None:
    """Breaks the reference cycle the driver leaves in a request that is over (its ``ResponseFuture``
    holds its timer, whose callback is the future's own method), so that the request, its statement and
    every payload in it are freed at once rather than by the cyclic collector: under load, most of the
    server's garbage collection time (docs/benchmarks-log.md). Never while the request runs: it needs its
    timer."""
    response._timer = None


def bridge(
    loop: asyncio.AbstractEventLoop, response: Any, timeout_s: float
) -> asyncio.Future[list[dict[str, Any]]]:
    """An asyncio future settled (on ``loop``) by a driver ``ResponseFuture`` sent without a timeout,
    which is timed out as the driver would after ``timeout_s`` if no answer came (``_expire``)."""
    future: asyncio.Future[list[dict[str, Any]]] = loop.create_future()
    # Only the answer stops it, not a cancelled waiter: the request must end either way. Cancelling
    # the handle also drops its reference to the request, so an answered one leaves no cycle.
    timer = loop.call_later(timeout_s, _expire, response)

    def settle(value: Any, error: BaseException | None) -> None:
        timer.cancel()
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def ok(rows: Any) -> None:
        try:
            loop.call_soon_threadsafe(settle, list(rows or ()), None)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def failed(exc: BaseException) -> None:
        try:
            loop.call_soon_threadsafe(settle, None, exc)
        except RuntimeError:
            pass

    response.add_callbacks(ok, failed)
    return future


def _expire(response: Any) -> None:
    """A request's time ran out on the loop: the driver times it out on its own thread, where its timers
    and the answers run, so that an answer and the timeout are handled one after the other (it frees
    the request's stream and fails it with ``OperationTimedOut``; a retry the driver's executor sends
    meanwhile fails the same way, maybe applied). A timer of the driver's per request instead is made
    and queued on the loop and signalled to that thread, which keeps it queued for the whole timeout:
    work on both threads for every statement (docs/benchmarks-log.md)."""
    response.session.cluster.connection_class.create_timer(0, partial(_time_out, response))


def _time_out(response: Any) -> None:
    """The driver's thread: ``response`` fails as timed out, unless it was answered meanwhile."""
    if not response._event.is_set():
        response._on_timeout()
