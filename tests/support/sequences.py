"""Numbered ZeroEQ messages and what a Parquet sink made of them: for the tests that run the
capture job on a cluster and check that every message landed exactly once."""

from __future__ import annotations

import itertools
import re
import threading
from datetime import datetime, timezone
from pathlib import Path

from support.common import wait_until

ECHO = "zeroeq::test::Echo"


class Sender:
    """Publishes 0, 1, 2, ... on every publisher at ``rate`` messages per second each."""

    def __init__(self, publishers, rate: float) -> None:
        self.publishers = publishers
        self.rate = rate
        self.sent = {p.instance_name: 0 for p in publishers}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0 / self.rate):
            for publisher in self.publishers:
                publisher.publish(ECHO, b"%d" % self.sent[publisher.instance_name])
                self.sent[publisher.instance_name] += 1

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.sent


def sink_rows(spark, path: Path) -> list:
    try:
        return spark.read.parquet(str(path)).select("partition", "payload", "error").collect()
    except Exception:  # nothing committed yet
        return []


def sequences(rows) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for row in rows:
        if row.error is None:
            found.setdefault(row.partition, []).append(int(row.payload))
    return found


def wait_for_all_sent(spark, sink: Path, sent: dict[str, int], timeout: float = 120) -> list:
    def done():
        rows = sink_rows(spark, sink)
        last = {k: max(v) for k, v in sequences(rows).items()}
        return rows if all(last.get(k) == n - 1 for k, n in sent.items()) else None

    return wait_until(done, timeout=timeout, interval=1.0, what="every sent message in the sink")


def check_exactly_once(rows, sent: dict[str, int], moved: set[str]) -> None:
    """No sequence number twice; a hole only where the partition moved (one, with a gap row)."""
    seqs = sequences(rows)
    gaps = {row.partition for row in rows if row.error and "had no holder between" in row.error}
    for key, n in sent.items():
        got = sorted(seqs[key])
        assert len(got) == len(set(got)), f"duplicates in {key}"
        holes = [(a, b) for a, b in itertools.pairwise(got) if b != a + 1]
        if key in moved:
            assert len(holes) <= 1, f"{key}: holes {holes}"
            assert key in gaps, f"{key} moved without a gap row"
        else:
            assert holes == [], f"{key} lost messages but never moved: {holes}"
        assert got[-1] == n - 1


def offset_rows(spark, path: Path) -> list:
    """(partition, offset, payload, error) of every row of the Parquet table at ``path``."""
    try:
        return (
            spark.read.parquet(str(path))
            .select("partition", "offset", "payload", "error")
            .collect()
        )
    except Exception:  # nothing committed yet
        return []


def check_every_hole_has_a_gap_row(rows, sent: dict[str, int]) -> dict[str, int]:
    """In offset order each partition's sequence numbers rise by one, except across a gap row
    (``error`` set, no payload); none is read twice. Returns the holes per partition."""
    data: dict[str, list[tuple[int, int]]] = {}
    gaps: dict[str, list[int]] = {}
    for row in rows:
        if row.error is None:
            data.setdefault(row.partition, []).append((row.offset, int(row.payload)))
        elif row.payload is None:
            gaps.setdefault(row.partition, []).append(row.offset)
    holes = {}
    for key, n in sent.items():
        got = sorted(data[key])
        seqs = [seq for _, seq in got]
        assert len(seqs) == len(set(seqs)), f"duplicates in {key}"
        before = [(-1, -1), *got]
        missing = [(a, b) for a, b in zip(before, got) if b[1] != a[1] + 1]
        for (offset_a, seq_a), (offset_b, seq_b) in missing:
            assert seq_b > seq_a, f"{key}: {seq_b} after {seq_a}"
            assert any(offset_a < g < offset_b for g in gaps.get(key, ())), (
                f"{key}: messages {seq_a + 1}..{seq_b - 1} missing between offsets {offset_a} "
                f"and {offset_b} with no gap row (gap rows at {gaps.get(key)})"
            )
        assert seqs[-1] == n - 1, f"{key}: the last message {n - 1} is missing"
        holes[key] = len(missing)
    return holes


def gap_ends(rows, keys: set[str]) -> dict[str, float]:
    """Partition -> when capture resumed (the end of its holder-change gap row), of ``keys``."""
    ends = {}
    for row in rows:
        found = row.error and re.search(r"had no holder between \S+ and (\S+) ", row.error)
        if found and row.partition in keys:
            at = datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S.%fZ")
            ends[row.partition] = at.replace(tzinfo=timezone.utc).timestamp()
    return ends
