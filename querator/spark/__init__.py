"""Spark producers: write a DataFrame or a stream into a Querator queue at high throughput, exactly once.

Install with ``pip install querator[spark]`` (pyspark, pyarrow, pandas). With Spark >= 4.0::

    from querator.spark import register

    register(spark)
    (df.write.format("querator")
        .option("endpoint", "http://localhost:2319")
        .option("queue", "jobs")
        .mode("append")
        .save())

and ``df.writeStream.format("querator")...`` for a stream; with Spark 3.5,
``write_to_queue(df, "http://localhost:2319", "jobs")``. Options are documented on ``SinkConfig`` and in
docs/spark.md.

Modules: ``_config`` (options), ``_schema`` (driver-side column checks), ``_items`` (column mapping, bad
rows), ``_producer`` (requests, retries), ``_task`` (one task's write, dedup ids), ``_totals``
(reporting), ``_datasource`` (the Python Data Source) and ``_foreach`` (the Spark 3.5 helper).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

try:
    import pyarrow  # noqa: F401 - the executors need it: fail here, with the extra to install
    import pyspark  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(f"querator.spark needs pyspark and pyarrow: pip install 'querator[spark]' ({e})") from e

from querator.spark._config import WHOLE_ROW, SinkConfig, SinkConfigError
from querator.spark._foreach import write_to_queue
from querator.spark._items import BadRowError
from querator.spark._producer import ProduceFailed
from querator.spark._totals import WriteTotals

if TYPE_CHECKING:
    from querator.spark._datasource import (
        QueratorDataSource,
        QueratorStreamWriter,
        QueratorWriter,
        TaskReport,
    )

__all__ = [
    "WHOLE_ROW",
    "BadRowError",
    "ProduceFailed",
    "QueratorDataSource",
    "QueratorStreamWriter",
    "QueratorWriter",
    "SinkConfig",
    "SinkConfigError",
    "TaskReport",
    "WriteTotals",
    "register",
    "write_to_queue",
]

_DATASOURCE = {"QueratorDataSource", "QueratorStreamWriter", "QueratorWriter", "TaskReport"}


def __getattr__(name: str) -> Any:
    # The data source needs Spark >= 4.0; importing it lazily keeps write_to_queue usable on Spark 3.5.
    if name in _DATASOURCE:
        from querator.spark import _datasource

        return getattr(_datasource, name)
    raise AttributeError(f"module 'querator.spark' has no attribute {name!r}")


def register(spark: Any) -> None:
    """Registers the ``querator`` format with a ``SparkSession`` (Spark >= 4.0).

    Raises:
        RuntimeError: this Spark has no Python Data Source API (use ``write_to_queue``).
    """
    try:
        from querator.spark import _datasource
    except ImportError as e:
        raise RuntimeError(
            f"this Spark has no Python Data Source API (Spark >= 4.0 needed; {e}); "
            "use querator.spark.write_to_queue(df, ...) instead"
        ) from e
    _datasource.register(spark)
