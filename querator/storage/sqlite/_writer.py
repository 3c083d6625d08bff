"""The thread that owns the connection: runs jobs in order, several in one commit (group commit)."""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from typing import Final

from querator.storage.sqlite._connect import connect
from querator.storage.sqlite._errors import SqliteStorageError, lost_error, storage_error
from querator.storage.sqlite._jobs import Job, Outcome, deliver, noop
from querator.storage.sqlite._worker import Worker

log = logging.getLogger("querator.storage.sqlite")

MAX_GROUP: Final = 64
"""Most jobs the writer thread commits together."""


class Writer:
    """The thread that owns the connection: runs jobs in order, grouping waiting ones into one commit."""

    def __init__(self, path: str, synchronous: str, jobs: queue.SimpleQueue[Job]) -> None:
        self.thread = threading.Thread(target=self._main, name="querator-sqlite", daemon=True)
        self._path = path
        self._synchronous = synchronous
        self._jobs = jobs
        self._worker: Worker | None = None
        self.ready: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.damage = ""
        """Why the database is damaged, once sqlite said so: every later job is refused (a damaged file
        must not take writes), until a restart checks the file (docs/storage.md)."""
        self.full = ""
        """Why the last write failed for want of room, until a transaction that wrote commits."""

    def _main(self) -> None:
        assert self.ready is not None and self.loop is not None
        failure: BaseException
        try:
            self._worker = Worker(connect(self._path, self._synchronous))
        except sqlite3.Error as exc:
            failure = storage_error(exc, f"cannot open {self._path}")
        except OSError as exc:
            failure = SqliteStorageError(
                f"sqlite storage error; cannot open {self._path}: {exc.strerror or exc}"
            )
        except BaseException as exc:
            failure = exc
        else:
            deliver([(Job(noop, self.ready, self.loop), None, None)])
            self._serve(self._worker)
            return
        deliver([(Job(noop, self.ready, self.loop), None, failure)])

    def _serve(self, worker: Worker) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            group: list[Job] = []
            while not job.stop:
                group.append(job)
                if len(group) >= MAX_GROUP:
                    break
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    break
            if group:
                try:
                    self._run_group(worker, group)
                except BaseException as exc:  # a bug here must not leave callers waiting forever
                    log.exception("sqlite: the writer thread failed a group of jobs")
                    deliver([(j, None, exc) for j in group])
                    self._rollback(worker)
            if job.stop:
                self._close(worker, job)
                return

    def _close(self, worker: Worker, job: Job) -> None:
        error: BaseException | None = None
        try:
            worker.conn.close()
        except sqlite3.Error as exc:
            error = storage_error(exc)
        deliver([(job, None, error)])

    def _error(self, exc: sqlite3.Error) -> SqliteStorageError:
        """A driver error as ours, noting the damage or the full disk it reports."""
        error = storage_error(exc)
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # the primary code of an extended one
        if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) and not self.damage:
            self.damage = (
                f"sqlite storage error; the database {self._path} is damaged "
                f"({exc.sqlite_errorname}: {exc}): every job is refused until a restart checks it"
            )
            log.error("sqlite: %s", self.damage)
        elif code == sqlite3.SQLITE_FULL:
            self.full = error.message
        return error

    def _run_group(self, worker: Worker, jobs: list[Job]) -> None:
        conn = worker.conn
        # A job whose caller was cancelled before it started is not run at all.
        pending = [job for job in jobs if not job.future.cancelled()]
        if self.damage:
            refused = SqliteStorageError(self.damage)
            deliver([(job, None, refused) for job in pending])
            return
        while pending:
            outcomes: list[Outcome] = []
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                begin_error = self._error(exc)
                deliver([(job, None, begin_error) for job in pending])
                return
            wrote = False  # a job that changed rows and was not rolled back: its commit needs room
            done: list[Outcome] = []
            rest: list[Job] = []
            for index, job in enumerate(pending):
                mark = len(worker.new_keys)
                try:
                    changes = conn.total_changes
                    conn.execute("SAVEPOINT job")
                    value = job.fn(worker)
                    conn.execute("RELEASE job")
                    wrote = wrote or conn.total_changes > changes
                except BaseException as exc:
                    error = self._error(exc) if isinstance(exc, sqlite3.Error) else exc
                    outcomes.append((job, None, error))
                    if not self._undo_job(worker, mark):
                        # The whole transaction is gone, and with it what the jobs before this one did.
                        outcomes.extend((j, None, lost_error()) for j, _, _ in done)
                        done = []
                        rest = pending[index + 1 :]
                        break
                else:
                    done.append((job, value, None))
            else:
                done = self._commit(worker, done, wrote)
            outcomes.extend(done)
            deliver(outcomes)
            pending = rest

    @staticmethod
    def _undo_job(worker: Worker, mark: int) -> bool:
        """Rolls back one failed job's savepoint; False if the whole transaction had to go."""
        conn = worker.conn
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
            except sqlite3.Error:
                log.exception("sqlite: could not roll back a savepoint; rolling back the transaction")
            else:
                worker.forget_new_keys(mark)
                return True
        Writer._rollback(worker)
        return False

    def _commit(self, worker: Worker, done: list[Outcome], wrote: bool) -> list[Outcome]:
        conn = worker.conn
        try:
            conn.execute("COMMIT" if done else "ROLLBACK")
        except sqlite3.Error as exc:
            Writer._rollback(worker)
            error = self._error(exc)
            return [(job, None, error) for job, _, _ in done]
        if done:
            worker.new_keys.clear()
            if wrote:
                self.full = ""  # there was room for this write
        else:
            worker.forget_new_keys()
        return done

    @staticmethod
    def _rollback(worker: Worker) -> None:
        if worker.conn.in_transaction:
            try:
                worker.conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.exception("sqlite: rollback failed")
        worker.forget_new_keys()
