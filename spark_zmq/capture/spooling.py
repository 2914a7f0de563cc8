"""Writing a connection's buffer to the spool: a segment per flush, or, when the spool cannot
take it (at ``maxSpoolBytes``, or its storage refusing with ``onSpoolWriteError=drop``), a drop
episode that ends with one gap row. A partition that was not captured while capture was not
running (``spool.downtime``) gets its gap row just before its first rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from spark_zmq.capture.buffer import Buffer, MessageBuffer
from spark_zmq.capture.connections import Connection
from spark_zmq.log import logger
from spark_zmq.spool.downtime import Downtime
from spark_zmq.spool.layout import LeaseLost, SpoolWriteError
from spark_zmq.spool.writer import Spool
from spark_zmq.units import utc_text


class SegmentWriter:
    """Flushes connections' buffers into ``spool``."""

    def __init__(
        self,
        spool: Spool,
        name: str,
        drop_on_write_error: bool,
        downtime: Downtime | None = None,
    ) -> None:
        self.spool = spool
        self.name = name
        self.downtime = downtime
        #: a spool that cannot be written: drop and count (True) or stop capture (False)
        self.drop_on_write_error = drop_on_write_error

    def flush(self, conn: Connection) -> None:
        """Write what ``conn`` buffered (SpoolWriteError unless drops are allowed)."""
        if not len(conn.buffer):
            return
        taken = conn.buffer.take()
        key = conn.endpoint.key
        try:
            if conn.down_since is not None:  # one row, also at the bound: said before the rest
                self._end_downtime(conn, taken.time_at(0))
            if not self.spool.has_room(key):
                spool = self.spool
                bound = f"the spool {spool.root} reached maxSpoolBytes ({spool.max_bytes} bytes)"
                self._drop(conn, taken, bound)
                return
            if conn.drops:
                self._end_drop_episode(conn, taken.time_at(0))
            self.spool.append(key, conn.endpoint.source, taken.table())
            conn.drops.written()
        except SpoolWriteError as exc:
            if not self.drop_on_write_error:
                raise SpoolWriteError(
                    f"{exc}. The spool holds everything written before; the {len(taken)} "
                    f"messages of this flush are lost. Free the storage, or set "
                    f"onSpoolWriteError=drop to drop and count messages while the spool cannot "
                    f"be written"
                ) from None
            self._drop(conn, taken, f"the spool could not be written ({exc})")

    def write_last(self, conn: Connection, receive: Callable[[Connection], object]) -> bool:
        """Capture stops: what ``receive`` still takes from the socket, the buffer, and the gap
        rows of an open drop episode and of a downtime nothing was received after (it ends
        now); a failure is logged, so that the others are written. False after a failure."""
        try:
            receive(conn)
            self.flush(conn)
            if conn.down_since is not None:
                self._end_downtime(conn, time.time_ns())
            if conn.drops:
                self._end_drop_episode(conn, time.time_ns())
            return True
        except LeaseLost as exc:
            logger.warning(
                "%s: last messages of %s not written: %s", self.name, conn.endpoint.key, exc
            )
        except Exception:  # keep closing the others
            logger.exception(
                "%s: could not write the last messages of %s", self.name, conn.endpoint.key
            )
        return False

    def _end_downtime(self, conn: Connection, until: int) -> None:
        """Write the gap row of the time ``conn``'s partition was not captured, up to ``until``
        (ns: the first row received again), and log it once."""
        since = conn.down_since
        if since is None or self.downtime is None:
            return
        key = conn.endpoint.key
        text = self.downtime.describe(key, utc_text(int(since * 1e9)), utc_text(until))
        gap = Buffer([[]], [until], {0: text})
        self.spool.append(key, conn.endpoint.source, gap.table())
        conn.down_since = None
        self.downtime.recorded(key)
        logger.warning("%s: %s", self.name, text)

    def _drop(self, conn: Connection, taken: MessageBuffer, cause: str) -> None:
        """Drop new messages, count them, keep capture's own fault rows if it can, and end
        the episode if it is due (``drops``: waiting for room could last for good)."""
        conn.drops.drop(len(taken) - len(taken.faults), taken.time_at(0), cause)
        self._keep_faults(conn, taken)
        if conn.drops.due:
            try:
                self._end_drop_episode(conn, time.time_ns(), due=True)
            except SpoolWriteError:
                pass  # not even the reserve's room: the episode goes on, tried again later

    def _keep_faults(self, conn: Connection, taken: MessageBuffer) -> None:
        if not taken.faults:
            return
        kept = sorted(taken.faults)
        faults = Buffer(
            [[] for _ in kept],
            [taken.time_at(i) for i in kept],
            {n: taken.faults[i] for n, i in enumerate(kept)},
        )
        try:
            self.spool.append(conn.endpoint.key, conn.endpoint.source, faults.table())
        except SpoolWriteError:
            pass  # lost within the episode that the gap row reports

    def _end_drop_episode(self, conn: Connection, until: int, due: bool = False) -> None:
        """Write the gap row of a drop episode (raises SpoolWriteError if it still cannot);
        ``due``: while drops go on, into the spool's reserve if need be."""
        text = conn.drops.gap_text(until)
        gap = Buffer([[]], [until], {0: text})
        self.spool.append(
            conn.endpoint.key,
            conn.endpoint.source,
            gap.table(),
            dropped=conn.drops.count,
            into_reserve=due,
        )
        conn.drops.ended(text, due)
