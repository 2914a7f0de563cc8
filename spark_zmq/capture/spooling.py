"""Writing connections' buffers to the spool: a segment per connection and flush, those of a
flush in one file (``spool.segments``), or, when the spool cannot take it (at
``maxSpoolBytes``, or its storage refusing with ``onSpoolWriteError=drop``), a drop episode
that ends with one gap row. A partition that was not captured while capture was not
running (``spool.downtime``) gets its gap row just before its first rows.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple, Protocol

import pyarrow as pa

from spark_zmq.capture.buffer import Buffer, MessageBuffer
from spark_zmq.capture.connections import Connection
from spark_zmq.log import logger
from spark_zmq.spool.downtime import Downtime
from spark_zmq.spool.layout import LeaseLost, SpoolError, SpoolWriteError
from spark_zmq.spool.writer import Append, FlushPart, Spool
from spark_zmq.units import utc_text

#: a connection's buffer of at least this many bytes (``nbytes``) goes into a flush whole: its
#: arrays go to Arrow without a copy, a table of its own after the others in the flush file.
#: Smaller ones are copied into the flush's one buffer: a table each would cost more than the
#: copy, and a busy endpoint's copy would cost more than its table
OWN_TABLE_BYTES = 64 << 10
#: the flush's one buffer takes at most about this many bytes (``nbytes``: Arrow's binary
#: offsets are int32): past it a flush is written as several files
MAX_FLUSH_BYTES = 1 << 30


class _Taken:
    """A connection's messages among a flush's rows (what ``MessageBuffer`` reads of taken
    rows: their count, receive times, fault texts and frames' bytes)."""

    __slots__ = ("count", "first", "frame_bytes", "rows")

    def __init__(self, rows: MessageBuffer, first: int, count: int, frame_bytes: int) -> None:
        self.rows, self.first, self.count, self.frame_bytes = rows, first, count, frame_bytes

    def __len__(self) -> int:
        return self.count

    def time_at(self, index: int) -> int:
        return self.rows.time_at(self.first + index)

    @property
    def faults(self) -> dict[int, str]:
        first, stop = self.first, self.first + self.count
        return {row - first: text for row, text in self.rows.faults.items() if first <= row < stop}

    def newest_message_at(self) -> int | None:
        """When the newest message (not a fault row) was received (ns), if there is one."""
        faults = self.rows.faults
        for row in range(self.first + self.count - 1, self.first - 1, -1):
            if row not in faults:
                return self.rows.time_at(row)
        return None


class _Rows(Protocol):
    """Rows taken from a connection, as what drops them reads them (``MessageBuffer``,
    ``_Taken``)."""

    @property
    def faults(self) -> dict[int, str]: ...
    def __len__(self) -> int: ...
    def time_at(self, index: int) -> int: ...


class _Planned(NamedTuple):
    """One connection's share of a flush: its part of the rows, its messages among them, and
    what to note once they are written besides its counts (a downtime or a drop episode
    reported)."""

    conn: Connection
    part: FlushPart
    taken: _Taken
    reported: tuple[Callable[[], object], ...]


class _Flush:
    """The rows of one flush file: connections' small buffers moved into ``rows`` (one buffer
    of their kind: one table, not one per connection), then each large one's own table."""

    def __init__(self) -> None:
        self.rows: MessageBuffer | None = None
        self.merged: list[_Planned] = []
        self.own: list[tuple[_Planned, pa.Table]] = []

    def takes(self, buffer: MessageBuffer) -> bool:
        """Whether ``buffer``'s rows fit (a flush takes any large buffer, and a first one)."""
        rows = self.rows
        return (
            rows is None
            or buffer.nbytes >= OWN_TABLE_BYTES
            or (rows.nbytes + buffer.nbytes <= MAX_FLUSH_BYTES)
        )

    def rows_for(self, buffer: MessageBuffer) -> MessageBuffer:
        if self.rows is None:
            self.rows = buffer.flush_buffer()
        return self.rows

    @property
    def planned(self) -> list[_Planned]:
        """The connections' shares, in the order of their rows."""
        return self.merged + [planned for planned, _ in self.own]

    def table(self) -> pa.Table:
        tables = [] if self.rows is None else [self.rows.table()]
        tables += [table for _, table in self.own]
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


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
        """Write what ``conns`` buffered, in one flush file (``spool.segments``; several past
        MAX_FLUSH_BYTES): a flush of many endpoints costs one file and one table, not one per
        endpoint. The partitions taken over by a newer holder (nothing of them is written);
        SpoolWriteError, once the others are written, when a partition's rows could not be and
        drops are not allowed."""
        lost: list[LeaseLost] = []
        fatal: SpoolWriteError | None = None
        for flush in self._gather(conns):
            planned_all = flush.planned
            failures = self.spool.append_rows(flush.table(), [p.part for p in planned_all])
            for planned in planned_all:
                failure = failures.get(planned.conn.endpoint.key)
                if failure is None:
                    _written(planned)
                elif isinstance(failure, LeaseLost):
                    lost.append(failure)
                else:
                    try:
                        self._not_written(planned.conn, planned.taken, failure)
                    except SpoolWriteError as exc:
                        fatal = fatal or exc
        if fatal is not None:
            raise fatal
        return lost

    def _gather(self, conns: Iterable[Connection]) -> list[_Flush]:
        """The rows of a flush of ``conns`` (``_plan``), in one buffer, or several past
        MAX_FLUSH_BYTES; at the spool's bound a connection's messages are dropped and counted
        instead, at once (nothing of it goes in the flush)."""
        flushes: list[_Flush] = []
        for conn in conns:
            if not len(conn.buffer):
                continue
            if not self.spool.has_room(conn.endpoint.key):
                self._write_now(conn, conn.buffer.take())
                continue
            if not flushes or not flushes[-1].takes(conn.buffer):
                flushes.append(_Flush())
            self._plan(conn, flushes[-1])
        return flushes

    def _plan(self, conn: Connection, flush: _Flush) -> None:
        """Add to ``flush`` what it writes for ``conn``: the gap rows of a downtime or drop
        episode that ended, then what it received (moved into the flush's buffer, or taken
        whole if it is large)."""
        until = conn.buffer.time_at(0)
        gaps: list[str] = []
        reported: tuple[Callable[[], object], ...] = ()
        dropped = 0
        if conn.down_since is not None and (gap := self._downtime_gap(conn, until)) is not None:
            gaps.append(gap[0])
            reported += (gap[1],)
        if conn.drops:
            text, dropped = conn.drops.gap_text(until), conn.drops.count
            gaps.append(text)
            reported += (functools.partial(conn.drops.ended, text, False),)
        key, source = conn.endpoint.key, conn.endpoint.source
        if conn.buffer.nbytes >= OWN_TABLE_BYTES:
            whole = conn.buffer.take()
            table = whole.table()
            if gaps:
                gap_rows = Buffer([[] for _ in gaps], [until] * len(gaps), dict(enumerate(gaps)))
                table = pa.concat_tables([gap_rows.table(), table])
            taken = _Taken(whole, 0, len(whole), whole.frame_bytes)
            part = FlushPart(key, source, table.num_rows, dropped)
            flush.own.append((_Planned(conn, part, taken, reported), table))
            return
        rows = flush.rows_for(conn.buffer)
        begin = len(rows)
        for text in gaps:
            rows.add_fault(text, until)
        frame_bytes = conn.buffer.frame_bytes
        first = conn.buffer.move_to(rows)
        taken = _Taken(rows, first, len(rows) - first, frame_bytes)
        part = FlushPart(key, source, len(rows) - begin, dropped)
        flush.merged.append(_Planned(conn, part, taken, reported))

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

    def _not_written(self, conn: Connection, taken: _Rows, exc: SpoolError) -> None:
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
        gap = self._downtime_gap(conn, until)
        if gap is not None:
            row = Buffer([[]], [until], {0: gap[0]})
            self._write(Append(conn.endpoint.key, conn.endpoint.source, row.table()))
            gap[1]()

    def _downtime_gap(
        self, conn: Connection, until: int
    ) -> tuple[str, Callable[[], object]] | None:
        """The gap text of ``conn``'s downtime up to ``until``, and what to note once its row
        is written."""
        since = conn.down_since
        if since is None or self.downtime is None:
            return None
        downtime, key = self.downtime, conn.endpoint.key
        text = downtime.describe(key, utc_text(int(since * 1e9)), utc_text(until))

        def written() -> None:
            conn.down_since = None
            downtime.recorded(key)
            logger.warning("%s: %s", self.name, text)

        return text, written

    def _drop(self, conn: Connection, taken: _Rows, cause: str) -> None:
        """Drop new messages, count them, keep capture's own fault rows if it can, and end
        the episode if it is due (``drops``: waiting for room could last for good)."""
        conn.drops.drop(len(taken) - len(taken.faults), taken.time_at(0), cause)
        self._keep_faults(conn, taken)
        if conn.drops.due:
            try:
                self._end_drop_episode(conn, time.time_ns(), due=True)
            except SpoolWriteError:
                pass  # not even the reserve's room: the episode goes on, tried again later

    def _keep_faults(self, conn: Connection, taken: _Rows) -> None:
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
        key, source = conn.endpoint.key, conn.endpoint.source
        self._write(Append(key, source, gap.table(), conn.drops.count, due))
        conn.drops.ended(text, due)

    def _write(self, row: Append) -> None:
        """Write ``row`` at once (SpoolError if it cannot be)."""
        self.spool.append(
            row.key, row.source, row.table, row.dropped, into_reserve=row.into_reserve
        )


def _written(planned: _Planned) -> None:
    """Note in its connection what a flush wrote: the episodes its gap rows reported, the
    bytes of its messages' frames, and when its newest message was received."""
    for noted in planned.reported:
        noted()
    conn, taken = planned.conn, planned.taken
    conn.drops.written()
    conn.written_bytes += taken.frame_bytes
    newest = taken.newest_message_at()
    if newest is not None:
        conn.last_message_at = newest
