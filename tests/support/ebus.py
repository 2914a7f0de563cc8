"""Running rows through the EBUS request sink (the request tests and the CURVE tests)."""

from __future__ import annotations

import json
import uuid


def run_requests(spark, tmp_path, broker, rows, **options):
    """Write ``rows`` (dicts with `data`) through the request sink; (exception text, answers)."""
    name = uuid.uuid4().hex[:8]
    inbox = tmp_path / f"in-{name}"
    inbox.mkdir()
    (inbox / "rows.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    replies = tmp_path / f"replies-{name}"
    writer = (
        spark.readStream.schema("data STRING")
        .json(str(inbox))
        .writeStream.format("ebus")
        .option("frontendPort", broker.frontend_port)
        .option("replyPath", str(replies))
        .option("checkpointLocation", str(tmp_path / f"cp-{name}"))
        .trigger(availableNow=True)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start()
    try:
        query.awaitTermination(180)
    except Exception:  # a failed query raises here; its exception() tells why
        pass
    finally:
        query.stop()
    error = query.exception()
    answers = []
    if replies.exists():
        answers = sorted(
            (r.requestId, r.status, r.data, r.batchId)
            for r in spark.read.parquet(str(replies)).collect()
        )
    return (str(error) if error else None), answers, query.id
