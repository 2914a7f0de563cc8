"""Source trees that a benchmark compares side by side (``--variant LABEL=TREE``): each runs in
a process of its own, with that tree's ``spark_zmq`` first on its path."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
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
