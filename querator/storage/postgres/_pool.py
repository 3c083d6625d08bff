"""The connections: a fixed pool, each connection used by one worker thread at a time, and a run's
statements sent alone or, once they must share a transaction, in pipeline mode.

The engine's run functions call ``PartitionTx`` primitives that answer synchronously, so a run executes on
a worker thread with a blocking connection (as the Cassandra store's runs do): no hop back into the event
loop per statement. A run's statements go alone until one must share a transaction with a later one
(``Run``); then in pipeline mode, where the driver sends statements without waiting for their answers
until one is read, in the pipeline's implicit transaction that commits at its sync, and only a read it
needs an answer to (``head``, ``get``) costs a round trip of its own.

A connection that broke (PostgreSQL restarted, the network cut it) is closed and replaced by a new one on
its next use; until PostgreSQL answers again every job fails with ``PostgresStorageError``, which the
engine answers with a 454 and retries, and nothing committed is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format
from psycopg.types.numeric import Int8BinaryDumper, Int8Dumper

from querator.storage.postgres._arrays import register as register_arrays
from querator.storage.postgres._errors import PostgresStorageError, storage_error
from querator.storage.postgres._settings import PostgresSettings

log = logging.getLogger("querator.storage.postgres")

T = TypeVar("T")

Conn = psycopg.Connection[tuple[Any, ...]]


class _Utf8Dumper(Dumper):
    """A ``str`` as the ``BYTEA`` of its UTF-8: every string column is one (``_schema``). Lone surrogates
    pass as the bytes of their code points, as they came."""

    format = Format.BINARY
    oid = psycopg.postgres.types["bytea"].oid

    def dump(self, obj: str) -> bytes:
        return obj.encode("utf-8", "surrogatepass")


def text(value: bytes) -> str:
    """A string column's value (``_Utf8Dumper``'s bytes) as the ``str`` it was."""
    return value.decode("utf-8", "surrogatepass")


def register_dumpers(adapters: AdaptersMap) -> None:
    """How a connection's ``adapters`` send the store's parameters."""
    # Every integer the store sends is a BIGINT column's: as int8, never a numeric that would keep the
    # planner from comparing it with an index.
    adapters.register_dumper(int, Int8Dumper)
    adapters.register_dumper(int, Int8BinaryDumper)
    adapters.register_dumper(str, _Utf8Dumper)
    register_arrays(adapters)


def _connect(settings: PostgresSettings) -> Conn:
    conn = psycopg.Connection.connect(**settings.connect_kwargs(), autocommit=True)
    register_dumpers(conn.adapters)
    return conn


class Run:
    """A run's statements on ``conn``: each sent alone, a transaction of its own, until ``pipeline`` is
    called; from then on pipelined, in the pipeline's implicit transaction, committed by its sync.

    Alone, a statement is one send and one answer; in the pipeline it costs psycopg a flush, polls that
    hand the GIL over, and a sync and a flush request at the end. So a run whose statements are reads
    and a last write (a produce, a lease, a complete: the fence goes with its last write, ``_tx``) sends
    them alone; a write that must share the run's transaction with a later statement opens the pipeline
    first (docs/adr/0073).
    """

    __slots__ = ("commit_sent", "conn", "pipelined", "stack")

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.stack = contextlib.ExitStack()
        self.pipelined = False
        self.commit_sent = False
        """Whether what commits the run was sent: a connection lost since may have applied it."""

    def pipeline(self) -> None:
        """Pipelines the run's statements from here on (the earlier ones, reads, committed alone)."""
        if not self.pipelined:
            self.stack.enter_context(self.conn.pipeline())
            self.pipelined = True

    def commit(self, statement: str, params: Any) -> None:
        """Sends the run's last statement, which commits it: alone, or at the pipeline's sync."""
        if not self.pipelined:
            self.commit_sent = True
        self.conn.execute(statement, params)


def transaction(conn: Conn, body: Callable[[], T], subject: str = "the partition") -> T:
    """Runs ``body`` (statements on ``conn``) in one transaction, pipelined; returns once it committed.
    ``subject`` names the partition a fence in it speaks of.

    The transaction is the pipeline's implicit one: PostgreSQL runs the statements up to the pipeline's
    sync (sent when the block ends; a read mid-way asks for a flush, not a sync) as one transaction, and
    commits it at the sync, or rolls it back when one failed. So no ``BEGIN`` or ``COMMIT`` is sent: two
    statements fewer per run (docs/adr/0065).

    Raises:
        StorageError: PostgreSQL failed (``StaleOwnerError`` from the fence); nothing was applied unless
            ``maybe_applied``.
        Exception: whatever ``body`` raised; nothing was applied.
    """

    run = Run(conn)

    def pipelined() -> T:
        run.pipeline()
        return body()

    return run_statements(run, pipelined, subject)


def run_statements(run: Run, body: Callable[[], T], subject: str = "the partition") -> T:
    """Runs ``body``, whose statements go through ``run``: alone until it opens the pipeline, then in
    the pipeline's implicit transaction, committed when the block ends. Raises as ``transaction``."""
    conn = run.conn
    try:
        with run.stack:
            try:
                result = body()
            except BaseException:
                if run.pipelined:
                    _abort(conn)
                raise
            if run.pipelined:
                run.commit_sent = True  # the sync that ends the block commits
    except psycopg.Error as e:
        rollback(conn)
        raise storage_error(e, commit_sent=run.commit_sent, subject=subject) from e
    except BaseException:
        rollback(conn)
        raise
    return result


def _abort(conn: Conn) -> None:
    """Rolls back the pipeline's implicit transaction before the sync that ends the block would commit
    what ``body`` sent before it raised (a Python error, or a value the driver could not send)."""
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        pass  # a statement failed or the connection broke: the sync rolls back, or nothing commits


def rollback(conn: Conn) -> None:
    """Ends a transaction left open; a broken connection is left for the pool to replace."""
    if conn.closed:
        return
    try:
        conn.rollback()
    except psycopg.Error:
        pass  # broken: the pool replaces it


def rows(conn: Conn, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
    """The rows ``statement`` answers, in binary (bytea as it is, no hex)."""
    cursor = conn.cursor(binary=True)
    cursor.execute(statement, params)
    return cursor.fetchall()


def count(conn: Conn, statement: str, params: Any = ()) -> int:
    """The number of rows ``statement`` wrote."""
    return conn.execute(statement, params).rowcount


_Job = tuple[Callable[[Conn], T], "asyncio.Future[T]", asyncio.AbstractEventLoop]
"""A job for a worker thread: the function, the future its caller awaits, and that future's loop."""


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """In the loop: hands a job's outcome to its caller, unless the caller was cancelled meanwhile."""
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Pool:
    """``size`` connections (opened on first use, replaced when broken) and as many worker threads.

    When one connection turns out broken, or a new one cannot be made, every connection opened before is
    replaced on its next use too: a restart of PostgreSQL broke them all, and each would otherwise fail
    one more run.
    """

    def __init__(self, settings: PostgresSettings) -> None:
        self._settings = settings
        self._jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle: queue.SimpleQueue[tuple[Conn, int] | None] = queue.SimpleQueue()
        for _ in range(settings.connections):
            self._idle.put(None)
        self._generation = 0
        """Bumped when a connection broke: connections of an older generation are replaced."""
        self.closed = False

    async def run(self, fn: Callable[[Conn], T]) -> T:
        """Runs ``fn`` with a connection of its own on a worker thread.

        Raises:
            PostgresStorageError: the store is closed, or PostgreSQL cannot be reached.
            Exception: whatever ``fn`` raised.
        """
        if self.closed:
            raise PostgresStorageError("postgres storage error; the store is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if not self._threads:
            self._threads = [
                threading.Thread(target=self._serve, name=f"querator-postgres_{n}", daemon=True)
                for n in range(self._settings.connections)
            ]
            for thread in self._threads:
                thread.start()
        self._jobs.put((fn, future, loop))
        return await future

    def _serve(self) -> None:
        """A worker thread: runs jobs until ``close`` sends it None. Its own queue and one callback into
        the loop, rather than ``run_in_executor``, which chains a second future through callbacks on both
        sides: about a tenth of the event loop's samples at batch 1 (docs/adr/0065)."""
        while (job := self._jobs.get()) is not None:
            fn, future, loop = job
            if future.cancelled():  # its caller gave up before it started
                continue
            try:
                result, error = self._job(fn), None
            except BaseException as e:  # handed to the caller, as an executor does
                result, error = None, e
            with contextlib.suppress(RuntimeError):  # the loop was closed: nobody waits any more
                loop.call_soon_threadsafe(_settle, future, result, error)

    def _job(self, fn: Callable[[Conn], T]) -> T:
        # As many threads as connections: one is always idle for the thread that runs this.
        held = self._idle.get()
        try:
            if held is not None and (held[0].closed or held[1] < self._generation):
                held[0].close()
                held = None
            if held is None:
                try:
                    held = (_connect(self._settings), self._generation)
                except psycopg.Error as e:
                    self._generation += 1  # the server is gone: so are the other connections to it
                    raise storage_error(e, f"cannot connect to {self._settings.describe()}") from e
            try:
                return fn(held[0])
            except psycopg.Error as e:
                raise storage_error(e) from e
        finally:
            if held is not None and (held[0].broken or held[0].closed):
                log.warning(
                    "postgres: a connection to %s broke; the pool replaces every connection it holds",
                    self._settings.describe(),
                )
                held[0].close()
                self._generation = max(self._generation, held[1] + 1)
            self._idle.put(held)

    async def close(self) -> None:
        """Waits for running jobs, then closes every connection."""
        self.closed = True
        threads, self._threads = self._threads, []
        for _ in threads:
            self._jobs.put(None)  # after the jobs already queued, which run first
        for thread in threads:
            await asyncio.to_thread(thread.join)
        while not self._idle.empty():
            held = self._idle.get_nowait()
            if held is not None:
                held[0].close()
