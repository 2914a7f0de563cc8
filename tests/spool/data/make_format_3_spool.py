"""Makes ``format-3/``: a spool folder as builds of 0.3 wrote it before an exclusive writer
named its flush files by number (index.json format version 3: every segment a file in its
epoch folder, a link to its flush file), left by a capture that stopped without letting go (a
crash), for the upgrade tests.

Run it with such a build on the path (not with this one), from this folder::

    git worktree add /tmp/format-3 bd9b0a4   # made with this one; 32589c1 is the last
    PYTHONPATH=/tmp/format-3 python make_format_3_spool.py

What it holds: partition ``tcp://10.0.0.1:5000`` with three segments of 2, 3 and 1 messages
and a commit at 5, the last two segments and the commit as lines of its appended-segments file;
partition ``tcp://10.0.0.2:5000`` with one segment of 4 messages and a gap row (2 messages
dropped), both lines. Every message's frames are ``[b"<partition letter>", b"<n>"]``.
"""

import shutil
import time

import pyarrow as pa

from spark_zmq.spool.index import INDEX_FORMAT_VERSION, Source
from spark_zmq.spool.layout import SPOOL_SCHEMA
from spark_zmq.spool.writer import Spool

FOLDER = "format-3"


def rows(letter: str, numbers: range, fault: str | None = None) -> pa.Table:
    return pa.table(
        {
            "received_at": pa.array([time.time_ns() // 1000] * len(numbers), pa.int64()).cast(
                SPOOL_SCHEMA.field("received_at").type
            ),
            "frames": [[] if fault else [letter.encode(), str(n).encode()] for n in numbers],
            "fault": [fault] * len(numbers),
        },
        schema=SPOOL_SCHEMA,
    )


def main() -> None:
    assert INDEX_FORMAT_VERSION == 3, INDEX_FORMAT_VERSION
    shutil.rmtree(FOLDER, ignore_errors=True)
    spool = Spool(FOLDER, 1 << 30)
    a = Source("tcp://10.0.0.1:5000", {"session": "upgrade"})
    b = Source("tcp://10.0.0.2:5000", {"session": "upgrade"})
    spool.append(a.endpoint, a, rows("a", range(0, 2)))
    spool.append(a.endpoint, a, rows("a", range(2, 5)))
    spool.append(a.endpoint, a, rows("a", range(5, 6)))
    spool.append(b.endpoint, b, rows("b", range(0, 4)))
    spool.append(b.endpoint, b, rows("b", range(1), "gap: 2 messages dropped"), dropped=2)
    spool.truncate(a.endpoint, 5)
    spool.write_commits()
    # a crash: the LOCK goes with the process, nothing is sealed (the spool makes its
    # reserve anew: not kept here)


if __name__ == "__main__":
    main()
