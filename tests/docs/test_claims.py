"""The hand-written claims of the docs that a count or the code decides, checked against them:
the number of hypothesis targets on the Guarantees page, every option name a page mentions
(the generated option reference is the one source of names), and the supported versions on
the Operating page (pyproject.toml decides them). No Spark, no sockets: a second or so."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tomllib

from spark_zmq.cli import FORMATS
from spark_zmq.protocols.contract import SinkProtocol
from spark_zmq.stream_options import READER_OPTIONS, WRITER_OPTIONS
from support.common import ROOT
from support.docs import documents

#: the fuzz files, one per protocol, whose targets the Guarantees page counts
FUZZ_FILES = sorted((ROOT / "tests" / "protocols").glob("*/test_fuzz_*.py"))
#: the read-path targets outside them (decoders with bugs), counted with the read-path ones
READ_PATH_FILES = [ROOT / "tests" / "spark" / "test_rows.py"]

#: camelCase names in backticks or ``.option(...)`` calls of the docs that are not this
#: package's options: Spark's own options and API names
NOT_OPTIONS = {
    "checkpointLocation",  # Spark's option of every streaming query
    "maxOffsetsPerTrigger",  # the Kafka source's, named for comparison
    "foreachBatch",
    "toArrow",
    "recentProgress",
    "numInputRows",
    "inputRowsPerSecond",
    "processedRowsPerSecond",
    "durationMs",
    "startOffset",
    "endOffset",
    "latestOffset",
    "availableNow",
    "hostNetwork",  # a Kubernetes pod field
    "processAllAvailable",  # a StreamingQuery method
    "mapInArrow",  # a DataFrame method
    "applySchedulingParameters",  # libzmq's thread function (docs/performance.md)
}
CAMEL = r"[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+"
#: `name` or `name=value` in backticks (camelCase), a .option("name", ...) call, --option name=
MENTIONED = re.compile(
    rf"`(?P<ticked>{CAMEL})(?:=[^`\n]*)?`"
    rf"|\.option\(\s*[\"'](?P<called>\w+)[\"']"
    rf"|--option[ =](?P<flag>\w+)="
)


def fuzz_targets(paths: list[Path]) -> dict[str, int]:
    """Each test decorated ``@fuzz(N)`` (tests/support/fuzzing.py) in ``paths``: its examples."""
    found = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and getattr(decorator.func, "id", None) == "fuzz"
                    and isinstance(decorator.args[0], ast.Constant)
                ):
                    found[f"{path.name}::{node.name}"] = decorator.args[0].value
    return found


def test_the_guarantees_page_counts_the_fuzz_targets_that_exist():
    targets = fuzz_targets(FUZZ_FILES)
    read_path = {name: n for name, n in targets.items() if "_read_path_" in name}
    read_path |= fuzz_targets(READ_PATH_FILES)
    parsers = {name: n for name, n in targets.items() if "_read_path_" not in name}
    assert len(FUZZ_FILES) == 4 and len(parsers) > 20 and read_path
    page = (ROOT / "docs" / "guarantees.md").read_text()
    stated = re.search(r"(\d+) hypothesis targets of (\d+) to (\d+) examples each", page)
    assert stated, "docs/guarantees.md no longer says how many hypothesis targets there are"
    assert (int(stated[1]), int(stated[2]), int(stated[3])) == (
        len(parsers),
        min(parsers.values()),
        max(parsers.values()),
    ), (
        f"docs/guarantees.md: write {len(parsers)} targets of {min(parsers.values())} to "
        f"{max(parsers.values())} examples"
    )
    read_stated = re.search(r"(\d+) targets of (\d+) examples\b", page)
    assert read_stated and (int(read_stated[1]), int(read_stated[2])) == (
        len(read_path),
        max(read_path.values()),
    ), f"docs/guarantees.md: the read path has {len(read_path)} targets: {sorted(read_path)}"
    assert set(read_path.values()) == {int(read_stated[2])}


def option_names() -> set[str]:
    """Every option of every format, reader and writer: what the option reference lists."""
    names = {spec.name for spec in (*READER_OPTIONS, *WRITER_OPTIONS)}
    for protocol in FORMATS.values():
        names |= {spec.name for spec in protocol.reader_options}
        if isinstance(protocol, SinkProtocol):
            names |= {spec.name for spec in protocol.writer_options}
    return names


def unknown_option_names(text: str, known: set[str]) -> set[str]:
    """The names ``text`` mentions as options that are neither options nor Spark's names."""
    found = set()
    for match in MENTIONED.finditer(text):
        name = match["ticked"] or match["called"] or match["flag"]
        if name not in known and name not in NOT_OPTIONS and name.upper() != name:
            found.add(name)
    return found


def test_every_option_name_the_docs_mention_exists():
    known = option_names()
    assert not known & NOT_OPTIONS, "a name listed as Spark's is now an option of ours"
    wrong = {
        str(path.relative_to(ROOT)): sorted(names)
        for path in documents()
        if (names := unknown_option_names(path.read_text(), known))
    }
    assert not wrong, (
        "these pages name options that no format has (the option reference, "
        f"docs/options.md, lists them all): {wrong}"
    )


def test_the_option_name_check_can_fail():
    known = option_names()
    assert unknown_option_names("set `maxSpoolByte` to 1g", known) == {"maxSpoolByte"}
    assert unknown_option_names('.option("spoolpath", "/x")', known) == {"spoolpath"}
    assert unknown_option_names("--option bindInterfaces=*", known) == {"bindInterfaces"}
    assert not unknown_option_names("`maxSpoolBytes=1g`, `checkpointLocation`", known)


def test_the_operating_page_states_the_versions_pyproject_supports():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spark = next(s for s in project["optional-dependencies"]["spark"] if s.startswith("pyspark"))
    lower, upper = re.fullmatch(r"pyspark>=([\d.]+),<([\d.]+)", spark).groups()
    python = re.fullmatch(r">=([\d.]+)", project["requires-python"])[1]
    classifiers = [
        c.rsplit(":: ", 1)[1]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    page = (ROOT / "docs" / "operating.md").read_text()
    row = {
        cells[0]: cells[1]
        for line in page.splitlines()
        if line.startswith("| ") and len(cells := [c.strip() for c in line.split("|")[1:-1]]) > 2
    }
    assert row["Spark (pyspark)"] == f"{lower} or later, before {upper}", row
    assert row["Python"] == f"{python} or later ({', '.join(classifiers)} declared)", row
    assert "Operating System :: POSIX :: Linux" in project["classifiers"]
    assert row["Operating system"].startswith("Linux"), row
