"""Source trees that a benchmark compares side by side (``--variant LABEL=TREE``): each runs in
a process of its own, with that tree's ``spark_zmq`` first on its path."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

#: the benchmarks' folder (``harness`` is imported from it) and this checkout
BENCHMARKS = Path(__file__).resolve().parents[1]
CHECKOUT = BENCHMARKS.parent


def add_variant_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--variant LABEL=TREE``, repeatable; ``what`` says what is taken from TREE."""
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=TREE",
        help=f"{what} from source tree TREE (repeatable); default current=<this checkout>",
    )


def source_trees(variants: list[str]) -> list[tuple[str, str]]:
    """(label, absolute path) of each ``LABEL=TREE``; none given: this checkout as current."""
    trees = []
    for text in variants:
        label, sep, tree = text.partition("=")
        if not sep or not label or not tree:
            raise SystemExit(f"--variant {text!r}: expected LABEL=TREE")
        trees.append((label, str(Path(tree).resolve())))
    return trees or [("current", str(CHECKOUT))]


def tree_environment(tree: str) -> dict[str, str]:
    """This process's environment with ``tree`` (then the benchmarks' folder) on the path."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([tree, str(BENCHMARKS)]))


def run_in_tree(tree: str, script: str, arguments: list[str]) -> dict:
    """Run ``script`` with ``arguments`` (its ``--role`` for one trial) in a process of its own
    with ``tree`` first on the path; the JSON object its last line of output holds."""
    done = subprocess.run(
        [sys.executable, script, *arguments],
        env=tree_environment(tree),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"{tree}: {done.stderr[-3000:]}")
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def median_by_count(
    trees: Sequence[tuple[str, str]],
    counts: Sequence[int],
    repeats: int,
    run: Callable[[str, int], dict],
    describe: Callable[[dict], str],
    figures: Sequence[str],
) -> dict[str, dict[tuple[str, int], float]]:
    """For each count, ``repeats`` rounds in which each tree runs one trial in turn
    (``run(tree, count)``), each printed as it ends (``describe``); for each of ``figures``,
    the median of the trials' figure per (tree's label, count)."""
    medians: dict[str, dict[tuple[str, int], float]] = {figure: {} for figure in figures}
    for count in counts:
        trials: dict[str, list[dict]] = {label: [] for label, _ in trees}
        for _ in range(repeats):
            for label, tree in trees:
                result = run(tree, count)
                trials[label].append(result)
                print(f"  N={count:<6} {label:<12} {describe(result)}", flush=True)
        for figure in figures:
            for label, _ in trees:
                found = [r[figure] for r in trials[label]]
                medians[figure][label, count] = statistics.median(found)
    return medians


def print_against_first(
    trees: Sequence[tuple[str, str]],
    counts: Sequence[int],
    medians: dict[tuple[str, int], float],
    first_column: str,
    cell: Callable[[float], str],
    width: int,
) -> None:
    """A table of ``medians``: a row per count (headed ``first_column``), a column per tree
    (``width`` wide), each figure (``cell``) with its ratio to the first tree's."""
    first = trees[0][0]
    print(f"{first_column:<14}" + "".join(f"{label:>{width}}" for label, _ in trees))
    for count in counts:
        cells = ""
        for label, _ in trees:
            value = medians[label, count]
            cells += f"{cell(value)} ({value / medians[first, count]:.2f}x)"
        print(f"{count:<14}{cells}")
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")
