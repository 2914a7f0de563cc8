"""Offsets, ranges and admission control, kept apart from capture and from Spark's calls.

An offset as Spark stores it in the checkpoint is a JSON object: partition key -> the next
offset to read in that partition (per-partition sequence numbers of the spool).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

PartitionOffsets = dict[str, int]


class OffsetRange(NamedTuple):
    key: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def ranges(start: Mapping[str, int], end: Mapping[str, int],
           first_available: Mapping[str, int]) -> list[OffsetRange]:
    """The non-empty ranges between two offsets. A partition missing from ``start`` (it appeared
    after that offset was planned) starts at its first available offset."""
    result = []
    for key, stop in end.items():
        begin = start.get(key, first_available.get(key, 0))
        if stop > begin:
            result.append(OffsetRange(key, begin, stop))
    return result


def admit(start: Mapping[str, int], available: Mapping[str, int],
          first_available: Mapping[str, int], max_rows: int | None) -> PartitionOffsets:
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
    for key, size in backlog.items():
        end[key] = start.get(key, first_available.get(key, 0)) + shares[key]
    return end
