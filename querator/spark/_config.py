"""The sink's settings: ``SinkConfig``, parsed once from the Spark writer options (or keyword arguments).

Spark hands a Python data source its options as a case-insensitive map of strings, so every option is
parsed and validated here, on the driver, before any task starts: a typo fails the job at once with a
message naming the option, instead of failing every task later. The same dataclass travels (pickled) to
the executors, where nothing is parsed again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from querator.duration import SECOND, DurationError, parse_duration

__all__ = ["WHOLE_ROW", "SinkConfig", "SinkConfigError"]

WHOLE_ROW = "*"
"""``payloadColumn`` value meaning: the payload is the whole row, encoded as a JSON object."""

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class SinkConfigError(ValueError):
    """An option is missing, unknown or malformed. Raised on the driver, before any task runs."""


@dataclass(frozen=True)
class SinkConfig:
    """Where and how a Spark job produces rows as Querator items.

    Option names (``df.write.option(name, value)``) are given with each field; Spark compares them
    case-insensitively. Sizes are bytes, durations Go durations (``30s``) or plain seconds.
    """

    endpoints: tuple[str, ...]
    """``endpoint``: base URL(s), comma-separated (``http://a:2319,http://b:2319``). Required. Each task
    starts at a different one (by partition) and moves to the next when one stops answering."""
    queue: str
    """``queue``: the queue to produce to. Required; it must exist."""
    payload_column: str = "payload"
    """``payloadColumn``: a string column (sent as ``utf8``) or binary column (sent as ``bytes``); ``*``
    sends the whole row as a JSON object (and sets ``encoding`` to ``application/json`` unless an
    encoding column is given)."""
    reference_column: str | None = None
    """``referenceColumn``: string column copied to each item's ``reference``."""
    kind_column: str | None = None
    """``kindColumn``: string column copied to each item's ``kind``."""
    encoding_column: str | None = None
    """``encodingColumn``: string column copied to each item's ``encoding``."""
    enqueue_at_column: str | None = None
    """``enqueueAtColumn``: timestamp column; a row with a future value is scheduled (``enqueue_at``).
    Timestamps without a time zone are taken as UTC."""
    dedup_id_column: str | None = None
    """``dedupIdColumn``: string column used as each item's ``dedup_id`` (at most 128 characters),
    instead of the derived one. Use a business key to make whole re-runs of a job idempotent too."""
    dedup: bool = True
    """``dedup`` (default ``true``): give every item a derived ``dedup_id`` (write or streaming query,
    micro-batch, partition, row position), so retried and speculative tasks do not enqueue twice within
    the queue's ``dedup_window``. ``false`` sends no ``dedup_id`` (at-least-once)."""
    batch_size: int = 1000
    """``batchSize`` (default 1000, the server's maximum): items per produce request."""
    batch_bytes: int = 4_000_000
    """``batchBytes`` (default 4,000,000): estimated encoded bytes per produce request; the server's
    default body limit is 5,000,000."""
    max_item_bytes: int = 3_500_000
    """``maxItemBytes`` (default 3,500,000): an item whose estimated encoded size (base64 for binary
    payloads) is larger is a bad row."""
    max_in_flight: int = 4
    """``maxInFlight`` (default 4): produce requests one task keeps in flight at once."""
    request_timeout: float = 30.0
    """``requestTimeout`` (default ``30s``): how long the server may take over one produce."""
    retries: int = 8
    """``retries`` (default 8): attempts after the first for a request answered 454 or 5xx, or not
    answered at all; then the task fails."""
    retry_backoff: float = 0.1
    """``retryBackoff`` (default ``100ms``): wait before the first retry, doubling each time..."""
    max_retry_backoff: float = 5.0
    """``maxRetryBackoff`` (default ``5s``): ...up to this."""
    api_key: str | None = field(default=None, repr=False)
    """``apiKey``: sent as ``Authorization: Bearer <key>``."""
    address_nodes: bool = False
    """``addressNodes`` (default ``false``): ask ``cluster.info`` (at the first endpoint that answers)
    for the serving members owning partitions of the queue and spread the tasks over their addresses
    instead of the given endpoints."""
    skip_bad_rows: bool = False
    """``onBadRow``: ``fail`` (default) fails the task -- and so the job -- on the first row that cannot
    be an item (null payload, oversized, dedup id too long); ``skip`` drops such rows, counts them in the
    totals and logs the first reason."""
    report_file: str | None = None
    """``reportFile``: a path on the driver; each commit (and abort) appends its totals there as one JSON
    line, for programs that want the numbers rather than the log line."""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SinkConfig:
        """Parses Spark writer options (keys compared case-insensitively).

        Raises:
            SinkConfigError: a required option is missing, an option is unknown or its value invalid.
        """
        opts = {k.lower(): v for k, v in options.items()}
        # Options Spark itself reads (save(path), a stream's checkpoint) arrive here too.
        for key in _SPARK_OPTIONS:
            opts.pop(key, None)
        unknown = sorted(set(opts) - _KNOWN)
        if unknown:
            raise SinkConfigError(f"unknown querator option(s): {', '.join(unknown)}")
        endpoints = tuple(e.strip().rstrip("/") for e in opts.get("endpoint", "").split(",") if e.strip())
        queue = opts.get("queue", "").strip()
        if not endpoints:
            raise SinkConfigError("option 'endpoint' is required, e.g. http://localhost:2319")
        if not queue:
            raise SinkConfigError("option 'queue' is required")
        bad_row = opts.get("onbadrow", "fail").strip().lower()
        if bad_row not in ("fail", "skip"):
            raise SinkConfigError(f"option 'onBadRow' must be 'fail' or 'skip', not {bad_row!r}")
        config = cls(
            endpoints=endpoints,
            queue=queue,
            payload_column=opts.get("payloadcolumn", "payload"),
            reference_column=_column(opts, "referencecolumn"),
            kind_column=_column(opts, "kindcolumn"),
            encoding_column=_column(opts, "encodingcolumn"),
            enqueue_at_column=_column(opts, "enqueueatcolumn"),
            dedup_id_column=_column(opts, "dedupidcolumn"),
            dedup=_bool(opts, "dedup", True),
            batch_size=_int(opts, "batchsize", 1000),
            batch_bytes=_int(opts, "batchbytes", 4_000_000),
            max_item_bytes=_int(opts, "maxitembytes", 3_500_000),
            max_in_flight=_int(opts, "maxinflight", 4),
            request_timeout=_seconds(opts, "requesttimeout", 30.0),
            retries=_int(opts, "retries", 8, minimum=0),
            retry_backoff=_seconds(opts, "retrybackoff", 0.1),
            max_retry_backoff=_seconds(opts, "maxretrybackoff", 5.0),
            api_key=opts.get("apikey") or None,
            address_nodes=_bool(opts, "addressnodes", False),
            skip_bad_rows=bad_row == "skip",
            report_file=opts.get("reportfile") or None,
        )
        config.validate()
        return config

    def validate(self) -> None:
        """Checks the values (also for a ``SinkConfig`` built directly).

        Raises:
            SinkConfigError: a value is out of range.
        """
        if not self.endpoints or not all(e.startswith(("http://", "https://")) for e in self.endpoints):
            raise SinkConfigError(f"endpoint must be http:// or https:// URLs, not {self.endpoints!r}")
        if not self.queue:
            raise SinkConfigError("queue is required")
        if not 1 <= self.batch_size <= 1000:
            raise SinkConfigError(f"batchSize must be between 1 and 1000, not {self.batch_size}")
        if self.max_in_flight < 1:
            raise SinkConfigError(f"maxInFlight must be at least 1, not {self.max_in_flight}")
        if self.batch_bytes < 1 or self.max_item_bytes < 1:
            raise SinkConfigError("batchBytes and maxItemBytes must be positive")
        if self.request_timeout <= 0:
            raise SinkConfigError("requestTimeout must be positive")
        if self.retries < 0 or self.retry_backoff < 0 or self.max_retry_backoff < self.retry_backoff:
            raise SinkConfigError(
                "retries and retryBackoff must not be negative, maxRetryBackoff >= retryBackoff"
            )
        if not self.payload_column:
            raise SinkConfigError("payloadColumn must not be empty")

    @property
    def request_timeout_text(self) -> str:
        """``request_timeout`` as the Go duration the server expects (whole milliseconds)."""
        return f"{max(10, math.ceil(self.request_timeout * 1000))}ms"

    def columns(self) -> dict[str, str]:
        """The optional item fields mapped from columns: field name -> column name."""
        mapped = {
            "reference": self.reference_column,
            "kind": self.kind_column,
            "encoding": self.encoding_column,
            "enqueue_at": self.enqueue_at_column,
            "dedup_id": self.dedup_id_column,
        }
        return {name: column for name, column in mapped.items() if column}


_SPARK_OPTIONS = ("path", "checkpointlocation")
_KNOWN = {
    "endpoint",
    "queue",
    "payloadcolumn",
    "referencecolumn",
    "kindcolumn",
    "encodingcolumn",
    "enqueueatcolumn",
    "dedupidcolumn",
    "dedup",
    "batchsize",
    "batchbytes",
    "maxitembytes",
    "maxinflight",
    "requesttimeout",
    "retries",
    "retrybackoff",
    "maxretrybackoff",
    "apikey",
    "addressnodes",
    "onbadrow",
    "reportfile",
}


def _column(opts: Mapping[str, str], key: str) -> str | None:
    value = opts.get(key, "").strip()
    return value or None


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    value = opts.get(key)
    if value is None:
        return default
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise SinkConfigError(f"option {key!r} must be true or false, not {value!r}")


def _int(opts: Mapping[str, str], key: str, default: int, minimum: int = 1) -> int:
    value = opts.get(key)
    if value is None:
        return default
    try:
        number = int(value.replace("_", ""))
    except ValueError:
        raise SinkConfigError(f"option {key!r} must be an integer, not {value!r}") from None
    if number < minimum:
        raise SinkConfigError(f"option {key!r} must be at least {minimum}, not {number}")
    return number


def _seconds(opts: Mapping[str, str], key: str, default: float) -> float:
    """A Go duration (``250ms``) or a plain number of seconds."""
    value = opts.get(key)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parse_duration(value.strip()) / SECOND
    except DurationError:
        raise SinkConfigError(f"option {key!r} must be a duration such as 30s, not {value!r}") from None
