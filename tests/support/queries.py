"""Streaming queries into memory tables, and what those tables hold: the stream tests of every
format start their queries and read their rows through these."""

from __future__ import annotations

import json

from support.common import wait_until


def memory_query(spark, tmp_path, format_name: str, name: str, trigger=None, **options):
    """A streaming query of ``format_name`` into the memory table ``name``, with a spool and a
    checkpoint of its own under ``tmp_path`` (unless ``spoolPath`` is given); ``trigger`` as
    ``DataStreamWriter.trigger``'s keywords, every 500 ms by default."""
    stream = spark.readStream.format(format_name)
    options.setdefault("spoolPath", str(tmp_path / f"spool-{name}"))
    for key, value in options.items():
        stream = stream.option(key, value)
    writer = (
        stream.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
    )
    return writer.trigger(**(trigger or {"processingTime": "500 milliseconds"})).start()


def rows_of(spark, name: str) -> list:
    return spark.sql(f"select * from {name}").collect()


def wait_for_rows(spark, name: str, count: int, timeout: float = 60) -> list:
    return wait_until(
        lambda: (r := rows_of(spark, name)) and len(r) >= count and r,
        timeout=timeout,
        what=f"{count} rows in {name}",
    )


def payloads(spark, name: str) -> list[str]:
    """The table's payloads as text, in partition and offset order."""
    return [
        bytes(r.payload).decode()
        for r in spark.sql(f"select payload from {name} order by partition, offset").collect()
    ]


def end_offset(query) -> dict:
    """The end offset of the query's last micro-batch ({} before the first)."""
    progress = query.lastProgress
    offset = progress["sources"][0]["endOffset"] if progress else None
    return json.loads(offset) if isinstance(offset, str) else (offset or {})
