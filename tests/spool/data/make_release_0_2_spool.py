"""Makes ``release-0.2.0/``: a spool folder as release 0.2.0 writes it, for the upgrade tests.

Run it with release 0.2.0 of spark_zmq on the path (not with this one), from this folder::

    git worktree add /tmp/release-0.2.0 2d8e8a1   # the commit that made 0.2.0
    PYTHONPATH=/tmp/release-0.2.0 python make_release_0_2_spool.py

What it holds: partition ``tcp://10.0.0.1:5000`` with three segments of 2, 3 and 1 messages,
the first two committed; partition ``tcp://10.0.0.2:5000`` with one segment of 4 messages and a
gap row (2 messages dropped). Every message's frames are ``[b"<partition letter>", b"<n>"]``.
"""

import shutil
import time

import pyarrow as pa

import spark_zmq
from spark_zmq.spool.layout import SPOOL_SCHEMA, Source  # (0.2.0's places)
from spark_zmq.spool.writer import Spool

FOLDER = "release-0.2.0"


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
    assert spark_zmq.__version__ == "0.2.0", spark_zmq.__version__
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
    spool.close()


if __name__ == "__main__":
    main()
