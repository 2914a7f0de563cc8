"""Writing connections' buffers to the spool: a segment per connection and flush, those of a
flush in one file (``spool.segments``), or, when the spool cannot take it (at
``maxSpoolBytes``, or its storage refusing with ``onSpoolWriteError=drop``), a drop episode
that ends with one gap row. A partition that was not captured while capture was not
running (``spool.downtime``) gets its gap row just before its first rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

from spark_zmq.capture.buffer import Buffer, MessageBuffer
from spark_zmq.capture.connections import Connection
from spark_zmq.log import logger
from spark_zmq.spool.downtime import Downtime
from spark_zmq.spool.layout import LeaseLost, SpoolError, SpoolWriteError
from spark_zmq.spool.writer import Append, Spool
from spark_zmq.units import utc_text


class _Flush(NamedTuple):
    """One connection's share of a flush: the rows it appends, and what to note once they are
    written (a downtime or a drop episode reported, rows written)."""

    conn: Connection
    taken: MessageBuffer
    appends: list[Append]
    written: list[Callable[[], object]]


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
        """Write what ``conn`` buffered (SpoolWriteError unless drops are allowed; LeaseLost
        if its partition was taken over)."""
        for lost in self.flush_all([conn]):
            raise lost

    def flush_all(self, conns: Iterable[Connection]) -> list[LeaseLost]:
        """Write what ``conns`` buffered, in one flush file (``spool.segments``): a flush of
        many endpoints costs one file, not one per endpoint. The partitions taken over by a
        newer holder (nothing of them is written); SpoolWriteError, once the others are
        written, when a partition's rows could not be and drops are not allowed."""
        flushes = [flush for conn in conns if (flush := self._plan(conn)) is not None]
        failures = self.spool.append_all([a for flush in flushes for a in flush.appends])
        lost: list[LeaseLost] = []
        fatal: SpoolWriteError | None = None
        for flush in flushes:
            failure = failures.get(flush.conn.endpoint.key)
            if failure is None:
                for noted in flush.written:
                    noted()
            elif isinstance(failure, LeaseLost):
                lost.append(failure)
            else:
                try:
                    self._not_written(flush.conn, flush.taken, failure)
                except SpoolWriteError as exc:
                    fatal = fatal or exc
        if fatal is not None:
            raise fatal
        return lost

    def _plan(self, conn: Connection) -> _Flush | None:
        """What a flush appends for ``conn``: the gap rows of a downtime or drop episode that
        ended, then what it received. At the spool's bound its messages are dropped and
        counted instead, written at once (nothing of it goes in the flush file)."""
        if not len(conn.buffer):
            return None
        taken = conn.buffer.take()
        if not self.spool.has_room(conn.endpoint.key):
            self._write_now(conn, taken)
            return None
        flush = _Flush(conn, taken, [], [])
        if conn.down_since is not None:
            self._add(flush, self._downtime_row(conn, taken.time_at(0)))
        if conn.drops:
            self._add(flush, self._episode_row(conn, taken.time_at(0)))
        flush.appends.append(Append(conn.endpoint.key, conn.endpoint.source, taken.table()))
        flush.written.append(conn.drops.written)
        flush.written.append(lambda: _count_written(conn, taken))
        return flush

    @staticmethod
    def _add(flush: _Flush, row: tuple[Append, Callable[[], object]] | None) -> None:
        if row is not None:
            flush.appends.append(row[0])
            flush.written.append(row[1])

    def _write_now(self, conn: Connection, taken: MessageBuffer) -> None:
        """``conn``'s flush on its own (at the spool's bound): its downtime's gap row, then its
        messages dropped and counted."""
        try:
            if conn.down_since is not None:  # one row, also at the bound: said before the rest
                self._end_downtime(conn, taken.time_at(0))
            spool = self.spool
            bound = f"the spool {spool.root} reached maxSpoolBytes ({spool.max_bytes} bytes)"
            self._drop(conn, taken, bound)
        except SpoolWriteError as exc:
            self._not_written(conn, taken, exc)

    def _not_written(self, conn: Connection, taken: MessageBuffer, exc: SpoolError) -> None:
        """The storage refused ``conn``'s rows: drop and count them, or stop capture."""
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
        row = self._downtime_row(conn, until)
        if row is not None:
            self._write(row[0])
            row[1]()

    def _downtime_row(
        self, conn: Connection, until: int
    ) -> tuple[Append, Callable[[], object]] | None:
        """The gap row of ``conn``'s downtime up to ``until``, and what to note once it is
        written."""
        since = conn.down_since
        if since is None or self.downtime is None:
            return None
        downtime, key = self.downtime, conn.endpoint.key
        text = downtime.describe(key, utc_text(int(since * 1e9)), utc_text(until))
        gap = Buffer([[]], [until], {0: text})

        def written() -> None:
            conn.down_since = None
            downtime.recorded(key)
            logger.warning("%s: %s", self.name, text)

        return Append(key, conn.endpoint.source, gap.table()), written

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
        row, written = self._episode_row(conn, until, due)
        self._write(row)
        written()

    def _write(self, row: Append) -> None:
        """Write ``row`` at once (SpoolError if it cannot be)."""
        self.spool.append(
            row.key, row.source, row.table, row.dropped, into_reserve=row.into_reserve
        )

    def _episode_row(
        self, conn: Connection, until: int, due: bool = False
    ) -> tuple[Append, Callable[[], object]]:
        """The gap row of ``conn``'s drop episode up to ``until``, and what to note once it is
        written."""
        text = conn.drops.gap_text(until)
        gap = Buffer([[]], [until], {0: text})
        row = Append(conn.endpoint.key, conn.endpoint.source, gap.table(), conn.drops.count, due)
        return row, lambda: conn.drops.ended(text, due)


def _count_written(conn: Connection, taken: MessageBuffer) -> None:
    """Count in ``conn`` what its flush wrote: the bytes of its messages' frames, and when its
    newest message was received."""
    conn.written_bytes += taken.frame_bytes
    newest = next((i for i in reversed(range(len(taken))) if i not in taken.faults), None)
    if newest is not None:
        conn.last_message_at = taken.time_at(newest)
