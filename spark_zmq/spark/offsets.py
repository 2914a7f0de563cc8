"""Offsets, ranges and admission control, kept apart from capture and from Spark's calls.

An offset as Spark stores it in the checkpoint is a JSON object (``StreamOffset``): partition
key -> the next offset to read in that partition (per-partition sequence numbers of the spool),
plus the format version and, with ``capture=executors``, the round of claims planned.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from spark_zmq.errors import SparkZmqError
from spark_zmq.stream_options import EARLIEST, LATEST, OffsetSpec

PartitionOffsets = dict[str, int]

#: the layout of the offsets this release writes into checkpoints
OFFSET_VERSION = 1
VERSION_KEY = "spark_zmq.version"
#: a new value forces a micro-batch whose tasks include claims (partitions that need a capture
#: process, capture=executors)
CLAIMS_KEY = "spark_zmq.claims"
#: the identity of the spool folder the offsets were taken in (``spool.identity``)
SPOOL_KEY = "spark_zmq.spool"


class OffsetVersionError(SparkZmqError, ValueError):
    """A checkpoint's offset written in a layout this release does not read."""


@dataclass(frozen=True)
class StreamOffset:
    """One offset of a stream, as Spark checkpoints it.

    JSON: ``{"<partition>": next offset, ..., "spark_zmq.version": 1, "spark_zmq.claims": n,
    "spark_zmq.spool": "<spool id>"}``. An offset without a version was written before versions
    existed, in the same layout; one without a spool id, before offsets carried it.
    """

    ends: PartitionOffsets = field(default_factory=dict)
    claims_round: int | None = None
    spool: str | None = None

    def to_json(self) -> dict[str, int | str]:
        doc: dict[str, int | str] = {**self.ends, VERSION_KEY: OFFSET_VERSION}
        if self.claims_round is not None:
            doc[CLAIMS_KEY] = self.claims_round
        if self.spool is not None:
            doc[SPOOL_KEY] = self.spool
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StreamOffset:
        version = doc.get(VERSION_KEY, OFFSET_VERSION)
        if version != OFFSET_VERSION:
            raise OffsetVersionError(
                f"the checkpoint holds a spark_zmq offset of layout version {version!r}; this "
                f"release reads version {OFFSET_VERSION}. Run the release that wrote the "
                f"checkpoint, or start the query with a new checkpoint"
            )
        ends = {k: int(v) for k, v in doc.items() if k not in (VERSION_KEY, CLAIMS_KEY, SPOOL_KEY)}
        return cls(ends, doc.get(CLAIMS_KEY), doc.get(SPOOL_KEY))


class OffsetRange(NamedTuple):
    key: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def ranges(
    start: Mapping[str, int], end: Mapping[str, int], first_available: Mapping[str, int]
) -> list[OffsetRange]:
    """The non-empty ranges between two offsets. A partition missing from ``start`` (it appeared
    after that offset was planned) starts at its first available offset."""
    result = []
    for key, stop in end.items():
        begin = start.get(key, first_available.get(key, 0))
        if stop > begin:
            result.append(OffsetRange(key, begin, stop))
    return result


def split_ranges(
    planned: list[OffsetRange], min_partitions: int | None, floor: Mapping[str, int]
) -> list[OffsetRange]:
    """``planned`` cut into at least ``min_partitions`` read tasks, when it has fewer.

    As Kafka's ``minPartitions``: each range gets ``ceil(size / total * min_partitions)``
    contiguous pieces of near-equal size (never more pieces than offsets), so one busy
    partition is read by several tasks and a quiet one by one. Invariant: the pieces of a
    range cover it exactly, in order, without overlap, so the rows read are those of the
    unsplit range (each spool offset is one row, gap rows included). No cut falls below
    ``floor[key]``, the partition's first retained offset: offsets below it were deleted by
    retention and read as one gap row per range (``spool.reader.read_range``), which a cut
    there would repeat."""
    if min_partitions is None or len(planned) >= min_partitions:
        return list(planned)
    total = sum(r.size for r in planned)
    result: list[OffsetRange] = []
    for r in planned:
        pieces = math.ceil(r.size * min_partitions / total) if total else 1
        result.extend(_split(r, pieces, floor.get(r.key, r.start)))
    return result


def _split(whole: OffsetRange, pieces: int, floor: int) -> list[OffsetRange]:
    """``whole`` in ``pieces`` contiguous ranges cut at or above ``floor``; the first piece
    also holds what lies below ``floor``."""
    low = min(max(whole.start, floor), whole.end)
    pieces = max(1, min(pieces, whole.end - low))
    cuts = [low + (whole.end - low) * i // pieces for i in range(pieces + 1)]
    cuts[0] = whole.start
    return [OffsetRange(whole.key, a, b) for a, b in itertools.pairwise(cuts)]


#: what opening one range costs a read task, in rows of work (a range is read from at least
#: one spool file, about 0.85 ms of CPU however few rows it holds; a row costs about 0.5 µs)
RANGE_OPEN_ROWS = 1700


def plan_tasks(
    planned: list[OffsetRange],
    min_partitions: int | None,
    max_partitions: int,
    floor: Mapping[str, int],
) -> list[list[OffsetRange]]:
    """The read tasks of ``planned``, each a list of ranges: cut into at least
    ``min_partitions`` (``split_ranges``), then grouped into at most ``max_partitions`` or
    ``min_partitions`` tasks, whichever is more (``group_ranges``)."""
    pieces = split_ranges(planned, min_partitions, floor)
    return group_ranges(pieces, max(max_partitions, min_partitions or 0))


def group_ranges(planned: list[OffsetRange], tasks: int) -> list[list[OffsetRange]]:
    """``planned`` grouped into at most ``tasks`` read tasks of about equal work.

    A task's work is its rows plus ``RANGE_OPEN_ROWS`` a range. Ranges go, largest first,
    each to the task with the least work so far (the classic greedy for equal bins: no task
    gets more than 4/3 of the best split's largest). Invariant: every range of ``planned`` is
    in exactly one task, whole; ranges are never cut here. The result does not depend on the
    order of ``planned``: tasks are listed, and their ranges kept, in key order (then offset),
    so the same offsets plan the same tasks."""
    if len(planned) <= tasks:
        return [[r] for r in sorted(planned)]
    groups: list[list[OffsetRange]] = [[] for _ in range(tasks)]
    lightest = [(0, i) for i in range(tasks)]  # a heap of (work so far, task)
    for r in sorted(planned, key=lambda r: (-r.size, r)):
        work, task = heapq.heappop(lightest)
        groups[task].append(r)
        heapq.heappush(lightest, (work + r.size + RANGE_OPEN_ROWS, task))
    return sorted(sorted(group) for group in groups)


def admit(
    start: Mapping[str, int],
    available: Mapping[str, int],
    first_available: Mapping[str, int],
    max_rows: int | None,
) -> PartitionOffsets:
    """End offsets that admit at most ``max_rows`` new messages in total.

    Like Kafka's ``maxOffsetsPerTrigger``, the budget is shared in proportion to each
    partition's backlog; rounding leftovers go to the largest backlogs, so exactly
    ``max_rows`` are admitted when more are waiting, and every partition with a backlog moves
    once its share reaches one message.
    """
    backlog = {r.key: r.size for r in ranges(start, available, first_available)}
    total = sum(backlog.values())
    end = dict(available)
    if max_rows is None or total <= max_rows:
        return end
    shares = {key: size * max_rows // total for key, size in backlog.items()}
    leftover = max_rows - sum(shares.values())
    for key in sorted(backlog, key=lambda k: (shares[k] - backlog[k] * max_rows / total, k)):
        if leftover == 0:
            break
        if shares[key] < backlog[key]:
            shares[key] += 1
            leftover -= 1
    for key, _size in backlog.items():
        end[key] = start.get(key, first_available.get(key, 0)) + shares[key]
    return end


# -- startingOffsets and endingOffsets ---------------------------------------------------------


def resolve(
    spec: OffsetSpec,
    first: Mapping[str, int],
    end: Mapping[str, int],
    unnamed: str,
    option: str,
) -> PartitionOffsets:
    """The offset ``spec`` names in each partition the spool holds ([first, end) each).

    A partition the JSON does not name gets ``unnamed`` (earliest or latest). An offset
    outside what the spool holds is an OffsetRangeError naming the partition and the range;
    so is a partition that the spool does not hold.
    """
    if isinstance(spec, str):
        return dict(first if spec == "earliest" else end)
    missing = sorted(set(spec) - set(end))
    if missing:
        raise OffsetRangeError(
            f"option {option!r} names partitions the spool does not hold: {', '.join(missing)}"
            f" (it holds: {', '.join(sorted(end)) or 'none'})"
        )
    resolved = dict(first if unnamed == "earliest" else end)
    for key, offset in spec.items():
        if offset in (EARLIEST, LATEST):
            resolved[key] = first[key] if offset == EARLIEST else end[key]
        elif not first[key] <= offset <= end[key]:
            raise OffsetRangeError(
                f"option {option!r} asks for offset {offset} of partition {key}, but the spool "
                f"holds [{first[key]}, {end[key]}) of it (earlier offsets were committed and "
                f"deleted by retention: options spoolRetention, spoolRetentionBytes, "
                f"maxSpoolBytes)"
            )
        else:
            resolved[key] = offset
    return resolved


class OffsetRangeError(SparkZmqError, ValueError):
    """startingOffsets or endingOffsets names an offset or partition the spool does not hold."""
