"""The hand-written claims of the docs that a count or the code decides, checked against them:
the number of hypothesis targets on the Guarantees page, every option name a page mentions
(the generated option reference is the one source of names), the supported versions on the
Operating page (pyproject.toml decides them), the Security page's table of bounds (the options'
defaults and the code's constants), the defaults and ports of the Operating page's network table
and of the Security page's table of what each default opens, and the flush interval and key
bound the pages state. No Spark, no sockets: a second or so."""

from __future__ import annotations

import ast
import importlib
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


def all_option_specs() -> list:
    """Every option of every format, reader and writer: what the option reference lists (a
    name may be an option of several formats, or of a reader and a writer)."""
    specs = [*READER_OPTIONS, *WRITER_OPTIONS]
    for protocol in FORMATS.values():
        specs += protocol.reader_options
        if isinstance(protocol, SinkProtocol):
            specs += protocol.writer_options
    return specs


def option_names() -> set[str]:
    return {spec.name for spec in all_option_specs()}


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


#: the Security page's bounds that no option sets (its table says "(fixed)"), by the row's
#: first cell: the constants that decide them (all of a row's must agree)
FIXED_BOUNDS = {
    "capture's buffer per endpoint between flushes": (
        "spark_zmq.capture.buffer",
        "MAX_SEGMENT_BYTES",
    ),
    "a partition key (a name a peer chose)": ("spark_zmq.protocols.addresses", "MAX_KEY_BYTES"),
    "a row's `error` text": ("spark_zmq.spark.decoding", "MAX_ERROR_CHARS"),
    "a ZeroEQ vocabulary reply; an EBUS SERVICES answer or `ebus/workers` broadcast": (
        ("spark_zmq.protocols.zeroeq.vocabulary", "MAX_REPLY_BYTES"),
        ("spark_zmq.protocols.ebus.discovery", "MAX_MESSAGE_BYTES"),
    ),
    "a gobyd Manager answer": ("spark_zmq.protocols.goby.manager", "MAX_MANAGER_MESSAGE_BYTES"),
    "a request to a reader's vocabulary or management port": (
        "spark_zmq.protocols.zeroeq.reqrep",
        "MAX_REQUEST_BYTES",
    ),
}
#: rows of that table whose bound is not a number
NOT_A_NUMBER = {"Goby PROTOBUF types cached"}
UNITS = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
QUANTITY = re.compile(r"([\d,]+) ?(KiB|MiB|GiB)?\b")


def quantity(text: str) -> int:
    """The number a cell starts with, in bytes where it has a unit: '64 MiB', '10,000'."""
    found = QUANTITY.match(text)
    assert found, f"no number at the start of {text!r}"
    return int(found[1].replace(",", "")) * UNITS[found[2] or ""]


def option_defaults() -> dict[str, object]:
    """Every reader option's default, parsed as the option parses what a user gives."""
    specs = [*READER_OPTIONS, *(s for p in FORMATS.values() for s in p.reader_options)]
    return {s.name: s.parse(s.default) for s in specs if s.default is not None}


def table_rows(page: str, header: str) -> list[list[str]]:
    """The cells of each row of the table whose header row starts with ``header``."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.split("|")[1:-1]])
    return rows


def test_the_security_pages_bounds_are_the_codes():
    defaults = option_defaults()
    rows = table_rows((ROOT / "docs" / "security.md").read_text(), "| bound | option |")
    assert len(rows) >= 10, rows
    for bound, option, default, _ in rows:
        if bound in NOT_A_NUMBER:
            continue
        stated = quantity(default)
        if option == "(fixed)":
            assert bound in FIXED_BOUNDS, f"a fixed bound the test does not know: {bound!r}"
            places = FIXED_BOUNDS[bound]
            for module, name in places if isinstance(places[0], tuple) else (places,):
                actual = getattr(importlib.import_module(module), name)
                assert actual == stated, f"{bound}: the page says {default}, {name} is {actual}"
        else:
            name = option.strip("`")
            assert defaults[name] == stated, f"{name}: the page says {default}"


def test_the_flush_interval_the_pages_state_is_the_default():
    """'every `flushIntervalMs` (100 ms)' and 'a partition key ... (at most 1 KiB)'."""
    from spark_zmq.protocols.addresses import MAX_KEY_BYTES

    interval = option_defaults()["flushIntervalMs"]
    stated = {
        (path.name, int(ms))
        for path in documents()
        for ms in re.findall(r"`flushIntervalMs` \((\d+) ms\)", path.read_text())
    }
    assert stated, "no page states the flush interval any more: remove this test"
    assert all(ms == interval for _, ms in stated), (interval, stated)
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    key = re.search(
        r"A partition's name is a\s+key chosen from the endpoint \(at most (\d+) KiB\)", glossary
    )
    assert key and int(key[1]) * 1024 == MAX_KEY_BYTES, key


def option_default_texts() -> dict[str, set[str]]:
    """Every option's default as a user writes it, by name (``all_option_specs``)."""
    defaults: dict[str, set[str]] = {}
    for spec in all_option_specs():
        if spec.default is not None:
            defaults.setdefault(spec.name, set()).add(spec.default)
    return defaults


#: "`name` (`value`" in a table's cell: an option and the default the page gives it
NAMED_DEFAULT = re.compile(r"`(?P<name>\w+)` \(`(?P<value>[^`]+)`")


def test_the_network_and_security_pages_give_each_option_its_default():
    """Operating's network table and Security's table of what each default opens: each option
    named with a value has that default, and each port of a network row is the default of an
    option the row names (where it names one with a port for a default)."""
    defaults = option_default_texts()
    checked = []
    for page in ("operating.md", "security.md"):
        rows = [line for line in (ROOT / "docs" / page).read_text().splitlines() if line[:1] == "|"]
        for found in NAMED_DEFAULT.finditer("\n".join(rows)):
            name, value = found["name"], found["value"]
            assert value in defaults.get(name, set()), f"{page}: {name} ({value})"
            checked.append(name)
    opens = table_rows((ROOT / "docs" / "security.md").read_text(), "| what | listens or sends")
    for _, option, default in opens:
        name, value = option.strip("`"), re.match(r"`([^`]+)`", default)
        if name in defaults and value:
            assert value[1] in defaults[name], f"security.md: {name} defaults to {value[1]}"
            checked.append(name)
    network = table_rows((ROOT / "docs" / "operating.md").read_text(), "| format | what |")
    for row in network:
        ports = {int(p) for p in re.findall(r"\b(?:TCP|UDP) (\d+)\b", row[2])}
        named = {d for n in re.findall(r"`(\w+)`", row[4]) for d in defaults.get(n, ())}
        port_defaults = {int(d) for d in named if d.isdigit()}
        if ports and port_defaults:
            assert ports <= port_defaults, f"operating.md, {row[0]} {row[1]}: {ports}"
            checked += [f"{row[0]} port"] * len(ports)
    assert len(checked) >= 10, checked
