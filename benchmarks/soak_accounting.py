"""The soak's accounting (``soak.py``): every message missing from the table belongs to a
hole between two delivered messages of its publisher, and is counted by kind of loss, as the
docstring of ``soak.py`` says."""

from __future__ import annotations

import calendar
import itertools
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from spark_zmq.spark.offsets import StreamOffset

#: seconds that a gap row's time span is widened by when matched against a hole
MARK_SLACK = 0.5
#: seconds after a restarted publisher or broker starts that its peers may still be connecting
PEER_SETTLE = 5.0
#: a restart of a publisher (its index) or of the broker (None: every publisher): from, to
PeerWindow = tuple[int | None, float, float]
GAP_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


class RunFiles(Protocol):
    """Where a run's query wrote (``soak_run.Run``), and the restarts of its peers."""

    folder: Path  # holds the checkpoint
    peer_windows: list[PeerWindow]

    @property
    def spool(self) -> Path: ...

    @property
    def sink(self) -> Path: ...


@dataclass(frozen=True)
class Delivered:
    """One publisher's message as the table holds it."""

    sequence: int
    partition: str
    offset: int
    sent_at: float


@dataclass(frozen=True)
class GapRow:
    """A gap row: where it sits and the time span its text names (epoch seconds)."""

    offset: int
    since: float
    until: float
    timed: bool  # False: its text names no time (a damaged segment), it marks by offset only


@dataclass(frozen=True)
class Hole:
    """A run of one publisher's sequence numbers missing from the table, between its delivered
    messages ``before`` and ``after`` (None at the start or the end of its stream)."""

    publisher: int
    missing: int
    before: Delivered | None
    after: Delivered | None


def gap_row(offset: int, text: str, received_at: float) -> GapRow:
    """The time span of a gap row's text (see the module's docstring for the rule)."""
    times = [
        calendar.timegm(time.strptime(found[:19], "%Y-%m-%dT%H:%M:%S")) + int(found[20:23]) / 1000
        for found in GAP_TIME.findall(text)
    ]
    if not times:
        return GapRow(offset, received_at, received_at, timed=False)
    return GapRow(offset, times[0], times[1] if len(times) > 1 else received_at, timed=True)


def holes(delivered: dict[int, list[Delivered]], sent: dict[int, int]) -> Iterator[Hole]:
    """Every run of missing sequence numbers of every publisher."""
    for publisher, total in sent.items():
        messages = sorted(delivered.get(publisher, []), key=lambda m: m.sequence)
        bounds: list[Delivered | None] = [None, *messages, None]
        for before, after in itertools.pairwise(bounds):
            first = before.sequence + 1 if before else 0
            end = after.sequence if after else total
            if end > first:
                yield Hole(publisher, end - first, before, after)


@dataclass(frozen=True)
class Schedule:
    """When a publisher sent each sequence number: its runs (first sequence number, start in
    epoch seconds), each at ``rate``."""

    runs: list[tuple[int, float]]
    rate: float

    def sent_at(self, sequence: int) -> float:
        first, start = max((run for run in self.runs if run[0] <= sequence), default=(0, 0.0))
        return start + (sequence - first) / self.rate


def marked(hole: Hole, when: float, gaps: dict[str, list[GapRow]]) -> bool:
    """True if a gap row of the hole's partition marks its message sent at ``when``."""
    partitions = {m.partition for m in (hole.before, hole.after) if m is not None} or set(gaps)
    after_offset = hole.before.offset if hole.before else -1
    for partition in partitions:
        for gap in gaps.get(partition, []):
            if gap.offset <= after_offset:
                continue
            if gap.timed:
                if gap.since - MARK_SLACK <= when <= gap.until + MARK_SLACK:
                    return True
            elif hole.after is None or gap.offset < hole.after.offset:
                return True
    return False


def kind_of(
    hole: Hole, when: float, gaps: dict[str, list[GapRow]], windows: list[PeerWindow]
) -> str:
    """The kind of loss of the hole's message sent at ``when``: the first rule of the module's
    docstring that holds."""
    if marked(hole, when, gaps):
        return "marked"
    if hole.before is None and hole.after is not None:
        return "before first capture"
    if any(who in (None, hole.publisher) and begin <= when <= end for who, begin, end in windows):
        return "peer down"
    return "unmarked"


def classify(
    found: Iterator[Hole],
    schedules: dict[int, Schedule],
    gaps: dict[str, list[GapRow]],
    windows: list[PeerWindow],
) -> dict[str, int]:
    """Messages lost, by kind; each hole with unmarked messages is printed."""
    kinds = dict.fromkeys(("marked", "before first capture", "peer down", "unmarked"), 0)
    for hole in found:
        first = hole.before.sequence + 1 if hole.before else 0
        unmarked = []
        for sequence in range(first, first + hole.missing):
            when = schedules[hole.publisher].sent_at(sequence)
            kind = kind_of(hole, when, gaps, windows)
            kinds[kind] += 1
            if kind == "unmarked":
                unmarked.append(when)
        if unmarked:
            print(
                f"  unmarked: {len(unmarked)} of {describe(hole)}, due between "
                f"{clock(min(unmarked))} and {clock(max(unmarked))}",
                flush=True,
            )
    return kinds


def clock(when: float) -> str:
    return datetime.fromtimestamp(when, timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def describe(hole: Hole) -> str:
    def at(m: Delivered | None) -> str:
        if m is None:
            return "-"
        return f"s={m.sequence} sent {clock(m.sent_at)} at offset {m.offset}"

    return (
        f"publisher {hole.publisher}: {hole.missing} messages between "
        f"({at(hole.before)}) and ({at(hole.after)})"
    )


def count(run: RunFiles, sent: dict[int, int], schedules: dict[int, Schedule]) -> dict[str, int]:
    """The figures, from the table (read by Spark: committed files only), the spool and the
    checkpoint. A row is lost after capture when its offset is below the partition's last
    committed end and the table lacks it; a row at or above that end is still in the spool,
    which the next run of the query delivers (a holder may write one after the drain, as the
    query stops). Messages missing from the table are counted by kind of loss (the module's
    docstring)."""
    from spark_zmq.spark.session import loopback_session
    from spark_zmq.spool.reader import read_snapshot

    spark = loopback_session("soak check", log_level="ERROR")
    try:
        rows = (
            spark.read.parquet(str(run.sink))
            .selectExpr(
                "partition", "offset", "data", "error", "unix_micros(received_at) AS received_us"
            )
            .collect()
        )
    finally:
        spark.stop()
    states = read_snapshot(str(run.spool))
    committed = committed_offsets(run.folder / "checkpoint")
    in_table: dict[str, set[int]] = {}
    for row in rows:
        in_table.setdefault(row.partition, set()).add(row.offset)
    lost = pending = 0
    for key, state in states.items():
        # a partition left out of the last commit holds nothing that was not committed before
        # (what it held below its start was committed, then truncated)
        covered = committed.get(key, state.start)
        lost += len(set(range(covered)) - in_table.get(key, set()))
        pending += max(0, state.end - covered)
    spooled = sum(state.end for state in states.values())
    delivered: dict[int, list[Delivered]] = {}
    sequences = []
    gaps: dict[str, list[GapRow]] = {}
    for row in rows:
        if row.error is None:
            message = json.loads(row.data)
            sequences.append((message["p"], message["s"]))
            delivered.setdefault(message["p"], []).append(
                Delivered(message["s"], row.partition, row.offset, message["t"])
            )
        elif row.error.startswith("gap:"):
            gaps.setdefault(row.partition, []).append(
                gap_row(row.offset, row.error, row.received_us / 1e6)
            )
    for messages in delivered.values():  # a duplicate is counted below, once is enough here
        messages[:] = list({m.sequence: m for m in messages}.values())
    unique = set(sequences)
    offsets = {(r.partition, r.offset) for r in rows}
    losses = classify(holes(delivered, sent), schedules, gaps, run.peer_windows)
    total_sent = sum(sent.values())
    return {
        "sent": total_sent,
        "captured": spooled - pending - sum(map(len, gaps.values())),
        "delivered": len(unique),
        "duplicated": (len(sequences) - len(unique)) + (len(rows) - len(offsets)),
        "lost before the first capture (expected)": losses["before first capture"],
        "lost while a peer was down (expected)": losses["peer down"],
        "lost while capture was down, marked": losses["marked"],
        "lost, unmarked": losses["unmarked"],
        "lost after capture": lost,
        "left in the spool (next run delivers)": pending,
        "gap rows": sum(map(len, gaps.values())),
    }


def committed_offsets(checkpoint: Path) -> dict[str, int]:
    """The source's end offsets of the last batch in the checkpoint's commit log."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")]
    if not commits:
        return {}
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    return StreamOffset.from_json(json.loads(lines[-1])).ends
