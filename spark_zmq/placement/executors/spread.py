"""How the capture processes of a spool share the partitions free to claim (``capture=executors``):
the least loaded claims first.

Every process works the spread out alone from what it read (``spread``): it goes through the
free partitions in key order and gives each to the live process that may capture it and holds
the fewest partitions (counting those given so far; ties go to the lower process id), then
claims the ones it gave itself. Processes that read the same records agree, so each partition
is claimed once, and a host's partitions that are free at once (its host lost) spread evenly
over the others. Where two disagree (one read a record a tick later), both may claim the same
partition: the epoch folder lets exactly one win. A partition whose process does not claim it
in time (``CLAIM_PATIENCE`` in ``holder``) is claimed by any process that may.

Partitions are spread when they are claimed; a holder keeps a partition until it stops (a move
costs a gap row), so a process that starts later takes new and freed partitions only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from spark_zmq.spool.processes import ProcessRecord


def spread(
    free: Iterable[str],
    processes: Iterable[ProcessRecord],
    loads: Mapping[str, int],
    may_capture: Callable[[ProcessRecord, str], bool],
) -> dict[str, str]:
    """Which process claims each partition of ``free`` (partition -> process id), among the
    live ``processes`` holding ``loads`` partitions each (by process id).
    ``may_capture``: whether a process may capture a partition (``reach.may_capture``); a
    partition no process may capture is left out."""
    counted = dict(loads)
    live = sorted(processes, key=lambda record: record.process)
    chosen = {}
    for key in sorted(free):
        able = [record for record in live if may_capture(record, key)]
        if not able:
            continue
        best = min(able, key=lambda record: (counted.get(record.process, 0), record.process))
        counted[best.process] = counted.get(best.process, 0) + 1
        chosen[key] = best.process
    return chosen
