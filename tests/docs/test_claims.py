"""The hand-written claims of the docs that a count or the code decides, checked against them:
the number of hypothesis targets on the Guarantees page, every option name a page mentions
(the generated option reference is the one source of names), the supported versions on the
Operating page (pyproject.toml decides them), the Security page's table of bounds (the options'
defaults and the code's constants), the defaults and ports of the Operating page's network table
and of the Security page's table of what each default opens, every default a page types next to
its option's name, the glossary's terms linked where each page first uses them, and the
delivery promise stated in full on the Guarantees page only. No Spark, no sockets: a second or
so."""

from __future__ import annotations

import ast
import importlib
import math
import re
from pathlib import Path

import tomllib

from spark_zmq.cli import FORMATS
from spark_zmq.protocols.contract import SinkProtocol
from spark_zmq.stream_options import READER_OPTIONS, WRITER_OPTIONS
from support.common import ROOT
from support.docs import documents, prose

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
    "reportLatestOffset",  # a DataSourceStreamReader method, as latestOffset
    "availableNow",
    "hostNetwork",  # a Kubernetes pod field
    "processAllAvailable",  # a StreamingQuery method
    "mapInArrow",  # a DataFrame method
    "applySchedulingParameters",  # libzmq's thread function (docs/performance.md)
    "cProfile",  # Python's profiler (docs/performance.md)
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


def test_the_operating_pages_tested_column_is_what_the_tests_run_on():
    """The "tested" column of the supported-versions table names the versions this suite
    runs on (CI runs it): a new pyspark, Python, Java or system shows here first."""
    import platform
    import subprocess
    import sys

    import pyspark

    rows = table_rows((ROOT / "docs" / "operating.md").read_text(), "| what | supported |")
    tested = {cells[0]: cells[2] for cells in rows}
    assert tested["Spark (pyspark)"].startswith(f"pyspark {pyspark.__version__},"), tested
    assert tested["Python"] == f"{sys.version_info.major}.{sys.version_info.minor}", tested
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    vendor, major = re.search(r'^(\w+) version "(\d+)', java, re.M).groups()
    assert tested["Java"] == f"{'OpenJDK' if vendor == 'openjdk' else vendor} {major}", java
    release = dict(
        line.split("=", 1)
        for line in Path("/etc/os-release").read_text().splitlines()
        if "=" in line
    )
    system = f"{release['NAME'].strip(chr(34)).split()[0]} {release['VERSION_ID'].strip(chr(34))}"
    assert tested["Operating system"] == f"Linux ({system}), {platform.machine()}", (tested, system)


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
    "open files of the process that captures, up to its hard limit (`ulimit -Hn`; capture "
    "raises its soft limit to it)": ("spark_zmq.capture.limits", "RESERVED_FILES"),
    "a request to a reader's vocabulary or management port": (
        "spark_zmq.protocols.zeroeq.reqrep",
        "MAX_REQUEST_BYTES",
    ),
}
#: rows of that table whose bound is not a number
NOT_A_NUMBER = {"Goby PROTOBUF types cached"}
#: what one of each size unit the pages write is, in bytes (lower case)
SIZE_UNITS = {
    **dict.fromkeys(("b", "byte", "bytes"), 1),
    **dict.fromkeys(("k", "kb", "kib"), 1 << 10),
    **dict.fromkeys(("m", "mb", "mib"), 1 << 20),
    **dict.fromkeys(("g", "gb", "gib"), 1 << 30),
    **dict.fromkeys(("t", "tb", "tib"), 1 << 40),
}
QUANTITY = re.compile(r"([\d,]+) ?(KiB|MiB|GiB)?\b")


def quantity(text: str) -> int:
    """The number a cell starts with, in bytes where it has a unit: '64 MiB', '10,000'."""
    found = QUANTITY.match(text)
    assert found, f"no number at the start of {text!r}"
    return int(found[1].replace(",", "")) * (SIZE_UNITS[found[2].lower()] if found[2] else 1)


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


def test_the_glossary_states_the_partition_key_bound():
    """'A partition's name is a key chosen from the endpoint (at most 1 KiB)': no option sets
    it, so ``test_every_default_a_page_types_next_to_its_option_is_the_options_default`` does
    not see it."""
    from spark_zmq.protocols.addresses import MAX_KEY_BYTES

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


GLOSSARY = ROOT / "docs" / "glossary.md"


def glossary_terms(glossary: Path = GLOSSARY) -> dict[str, str]:
    """The glossary's terms (its ``##`` headings, lower case) and their anchors, as mkdocs
    makes them (the toc extension's slugify)."""
    from markdown.extensions.toc import slugify

    headings = re.findall(r"^## (.+?)\s*$", glossary.read_text(), re.MULTILINE)
    return {heading.lower(): slugify(heading, "-") for heading in headings}


def site_pages() -> list[Path]:
    """The hand-written pages of the site: not the generated reference, not the glossary."""
    docs = GLOSSARY.parent
    pages = [*sorted(docs.glob("*.md")), *sorted(docs.glob("formats/*.md"))]
    return [page for page in pages if page != GLOSSARY]


def term_pattern(term: str) -> re.Pattern:
    """A term as running text uses it: any case ('Capture' opens a sentence), its words split
    at any blank or line end, and a plural 's' ('endpoints', 'gap rows'); whole words only, so
    'captured', 'spoolPath' and 'placeholder' are not uses."""
    words = r"\s+".join(map(re.escape, term.split()))
    return re.compile(rf"\b{words}s?\b", re.IGNORECASE)


def glossary_link(page: Path, anchor: str, glossary: Path = GLOSSARY) -> str:
    """The link target to a glossary entry from ``page``: ``glossary.md#gap-row``, or
    ``../glossary.md#gap-row`` from formats/."""
    up = len(page.relative_to(glossary.parent).parts) - 1
    return "../" * up + f"{glossary.name}#{anchor}"


def links_to(page: Path, target: str, anchor: str, glossary: Path) -> bool:
    path, _, fragment = target.partition("#")
    return fragment == anchor and (page.parent / path).resolve() == glossary.resolve()


def unlinked_first_uses(page: Path, terms: dict[str, str], glossary: Path = GLOSSARY) -> list[str]:
    """Each term whose first use on ``page`` is not a link to its glossary entry: where, and
    the link to write there.

    A use is the term in running text (outside fenced blocks, inline code, headings, HTML and
    the text of links), or a link to the term's entry whatever its text (so
    '[malformed](glossary.md#malformed-row)' uses 'malformed row'). A link's text is not
    running text: one that points elsewhere neither uses a term nor needs to link it."""
    text = prose(page)
    wrong = []
    for term, anchor in terms.items():
        bare = term_pattern(term).search(text.words)
        linked = [
            link.start for link in text.links if links_to(page, link.target, anchor, glossary)
        ]
        if bare and (not linked or bare.start() < min(linked)):
            where = f"{page.relative_to(glossary.parent.parent)}:{text.line(bare.start())}"
            target = glossary_link(page, anchor, glossary)
            wrong.append(f"{where}: {term!r} first used unlinked: write [{bare[0]}]({target})")
    return wrong


def test_every_page_links_each_glossary_term_where_it_first_uses_it():
    """Each hand-written page of the site (docs/*.md, docs/formats/*.md; not the generated
    reference, not the glossary) links each term of the glossary (its ``##`` headings, read
    from it) to its entry where the page first uses it. What counts as a use: the term in
    running text in any case and with a plural 's' ('Capture', 'gap rows'), not inside fenced
    blocks, inline code, headings, HTML or a link's text; a link to the entry is a use whatever
    its text. A term whose first use is such a link passes; one first used bare fails, named
    with its page and line."""
    terms = glossary_terms()
    assert {"endpoint", "holder", "gap row"} <= terms.keys(), terms
    wrong = [line for page in site_pages() for line in unlinked_first_uses(page, terms)]
    assert not wrong, "link each glossary term where a page first uses it:\n" + "\n".join(wrong)


def test_the_glossary_link_check_can_fail(tmp_path):
    docs = tmp_path / "docs"
    (docs / "formats").mkdir(parents=True)
    glossary = docs / "glossary.md"
    glossary.write_text("# Glossary\n\n## Capture\n\nx\n\n## Gap row\n\ny\n")
    terms = glossary_terms(glossary)
    assert terms == {"capture": "capture", "gap row": "gap-row"}

    def wrong(text: str, name: str = "page.md") -> list[str]:
        page = docs / name
        page.write_text(text)
        return [line.split(": ")[1] for line in unlinked_first_uses(page, terms, glossary)]

    assert wrong("Capture writes.\n\nA gap\nrows list.\n") == [
        "'capture' first used unlinked",
        "'gap row' first used unlinked",
    ]
    assert (
        wrong("[Capture](glossary.md#capture) writes; capture, [gaps](glossary.md#gap-row).") == []
    )
    assert wrong("`capture`, [capture](streams.md), # and\n```\ncapture\n```\n## Capture\n") == []
    assert wrong("It captured, [capture](glossary.md#gap-row) then capture.") == [
        "'capture' first used unlinked"
    ]
    assert wrong("[capture](glossary.md#capture), capture.", "formats/f.md") == [
        "'capture' first used unlinked"
    ]
    assert wrong("[capture](../glossary.md#capture), capture.", "formats/f.md") == []


GUARANTEES = ROOT / "docs" / "guarantees.md"
#: the words of the delivery promise, which docs/guarantees.md states in full
PROMISE = re.compile(r"exactly[- ]once|idempotent\s+sink|every\s+period\s+without\s+capture", re.I)
#: where a sentence ends in running text: a full stop, a blank line, a table cell's edge, an item
SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n[ \t]*\n|\||\n[ \t]*(?:[-*]|\d+\.)[ \t]")
#: most words a sentence that points to the promise may have
SHORT = 40


def sentence_around(text: str, offset: int) -> tuple[int, int]:
    """The span of the sentence of ``text`` (a page's running text) that holds ``offset``."""
    start = max((end.end() for end in SENTENCE_END.finditer(text, 0, offset)), default=0)
    after = SENTENCE_END.search(text, offset)
    return start, after.end() if after else len(text)


def restated_promises(page: Path) -> list[str]:
    """Each sentence of ``page`` that words the delivery promise (``PROMISE``) other than as one
    short sentence that links docs/guarantees.md and types no number of its own."""
    text = prose(page)
    wrong, seen = [], set()
    for found in PROMISE.finditer(text.words):
        start, end = sentence_around(text.words, found.start())
        if start in seen:
            continue
        seen.add(start)
        links = [link for link in text.links if start <= link.start < end]
        sentence = re.sub(r"\]\([^)\s]*\)", "]", text.text[start:end])
        to_guarantees = any(
            (page.parent / link.target.partition("#")[0]).resolve() == GUARANTEES for link in links
        )
        if (
            not to_guarantees
            or len(re.findall(r"\w+", sentence)) > SHORT
            or re.search(r"\d", sentence)
        ):
            line = text.line(found.start())
            where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name
            wrong.append(f"{where}:{line}: {' '.join(sentence.split())!r}")
    return wrong


def test_only_the_guarantees_page_states_the_delivery_promise():
    """Elsewhere a page says it in one short sentence that links the Guarantees page, with no
    figure of its own (the flush interval's default, for one, is its option's)."""
    wrong = [line for page in documents() if page != GUARANTEES for line in restated_promises(page)]
    assert not wrong, (
        "the delivery promise is stated in full on docs/guarantees.md only; elsewhere one short "
        "sentence that links it, without figures:\n" + "\n".join(wrong)
    )
    assert len(PROMISE.findall(GUARANTEES.read_text())) >= 3


def test_the_promise_check_can_fail(tmp_path):
    page = tmp_path / "page.md"

    def wrong(text: str) -> int:
        page.write_text(text)
        return len(restated_promises(page))

    assert wrong("Rows arrive exactly once, across restarts.\n") == 1
    assert wrong("It writes every 100 ms, exactly once ([G](guarantees.md)).\n") == 1
    assert wrong("| a | exactly-once ([G](other.md)) |\n") == 1
    assert wrong("An idempotent sink gets it ([Guarantees](docs/guarantees.md)). Exactly.\n") == 1
    assert (
        wrong(f"Exactly once ([G]({GUARANTEES})). Then `exactly once`.\n```\nexactly once\n```\n")
        == 0
    )


#: a value typed in running text: a literal in backticks, or a number (thousands may have
#: commas) with an optional unit; words ('any port', 'everything') are not typed values
LITERAL = r"`(?P<literal>[^`\n]+)`"
NUMBER = r"(?P<number>-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)(?:\s?(?P<unit>[A-Za-z]+))?"
TYPED = rf"(?:{LITERAL}|{NUMBER})"
#: an option's name and a default typed next to it, in the forms a page may use, where the
#: value closes its parenthesis, clause or sentence: "`name` (default V", "`name`, default V",
#: "`name` defaults to V" (V a literal or a number); "`name` (`V`)" or "`name` (`V`;" (a
#: literal alone in its parenthesis); "`name` (N)" and "`name`, N," (N a number: '(up to
#: `flushIntervalMs`, 100 ms)', '`leaseTimeout` (10 s)')
NAME = r"`(?P<name>[a-z]\w*)`"
NAME_AND_DEFAULT = [
    re.compile(
        rf"{NAME}(?:\s*\(default:?|,\s+default:?|\s+defaults\s+to)\s+{TYPED}"
        r"(?=\s*[),;:]|\.(?:\s|$))"
    ),
    re.compile(rf"{NAME}\s+\({LITERAL}(?=[);])"),
    re.compile(rf"{NAME}(?:\s+\(|,\s+){NUMBER}(?=\s*[),;])"),
]
#: a table whose first column is headed by an option's name and a row "| V (the default) |"
TABLE_HEAD = re.compile(r"^\|\s*`(?P<name>[a-z]\w*)`\s*\|", re.MULTILINE)
TABLE_DEFAULT = re.compile(r"^\|\s*" + TYPED + r"\s+\(the default\)\s*\|", re.MULTILINE)
TIME_UNITS = {
    **dict.fromkeys(("ms",), 0.001),
    **dict.fromkeys(("s", "sec", "second", "seconds"), 1.0),
    **dict.fromkeys(("min", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
}


def option_unit(spec) -> tuple[str, float]:
    """What an option's parsed value counts, and how many seconds or bytes one of it is: its
    parser (durations parse to seconds, sizes to bytes) or its ``accepts`` text."""
    parser = getattr(spec.parse, "__name__", "")
    if parser in ("duration", "retention_duration"):
        return "time", 1.0
    if parser == "byte_size":
        return "size", 1.0
    if "milliseconds" in spec.accepts:
        return "time", 0.001
    if "seconds" in spec.accepts:
        return "time", 1.0
    return "count", 1.0


def typed_value_matches(spec, typed: dict[str, str | None]) -> bool:
    """Whether a value typed next to ``spec``'s name (a ``TYPED`` match's groups) is its
    default."""
    default = spec.parse(spec.default)
    if typed.get("literal") is not None:
        try:
            return spec.parse(typed["literal"]) == default
        except (ValueError, KeyError):  # a choice's parser raises KeyError for a value it lacks
            return False
    number = float(typed["number"].replace(",", ""))
    kind, one = option_unit(spec)
    unit = (typed.get("unit") or "").lower()
    if not unit:
        written = number * one if kind == "time" else number
    elif kind == "time" and unit in TIME_UNITS:
        written = number * TIME_UNITS[unit]
    elif kind == "size" and unit in SIZE_UNITS:
        written = number * SIZE_UNITS[unit]
    else:
        return False
    if default is None:  # a default that is no number (`auto`): a number typed is not it
        return False
    actual = default * one if kind == "time" else default
    return math.isclose(written, actual)


def typed_defaults(text: str) -> list[tuple[int, str, re.Match]]:
    """Each option name with a default typed next to it in ``text`` (running text, with inline
    code): its offset, the name, the ``TYPED`` match (``NAME_AND_DEFAULT``, ``TABLE_DEFAULT``)."""
    found = [(m.start(), m["name"], m) for form in NAME_AND_DEFAULT for m in form.finditer(text)]
    for head in TABLE_HEAD.finditer(text):
        table_end = re.search(r"\n(?!\|)", text[head.end() :])
        table = text[head.end() : head.end() + table_end.start() if table_end else len(text)]
        for row in TABLE_DEFAULT.finditer(table):
            found.append((head.end() + row.start(), head["name"], row))
    return found


def wrong_typed_defaults(page: Path, specs: list) -> tuple[list[str], int]:
    """The defaults ``page`` types next to an option's name that are not that option's
    default (any option of that name: formats share names), and how many it types."""
    by_name: dict[str, list] = {}
    for spec in specs:
        if spec.default is not None:
            by_name.setdefault(spec.name, []).append(spec)
    text = prose(page)
    wrong, checked = [], 0
    for offset, name, typed in typed_defaults(text.plain):
        if name not in by_name:
            continue  # not an option with a default (its page says what not setting it does)
        checked += 1
        groups = typed.groupdict()
        if not any(typed_value_matches(spec, groups) for spec in by_name[name]):
            where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name
            value = groups.get("literal") or f"{groups['number']} {groups['unit'] or ''}".strip()
            defaults = sorted({f"{spec.default!r} ({spec.accepts})" for spec in by_name[name]})
            wrong.append(
                f"{where}:{text.line(offset)}: `{name}` written {value!r}; its default is "
                + " or ".join(defaults)
            )
    return wrong, checked


def test_every_default_a_page_types_next_to_its_option_is_the_options_default():
    """README.md and every docs page: each default typed next to the option's name (the forms
    of ``NAME_AND_DEFAULT`` and ``TABLE_DEFAULT``; units converted: ms, s, min, h, days; bytes,
    KiB/k, MiB/m, GiB/g) is the default of the option's definition."""
    specs = all_option_specs()
    wrong, checked = [], 0
    for page in documents():
        page_wrong, page_checked = wrong_typed_defaults(page, specs)
        wrong += page_wrong
        checked += page_checked
    assert not wrong, "these pages type a default that is not the option's:\n" + "\n".join(wrong)
    assert checked >= 25, checked


def test_the_typed_default_check_can_fail(tmp_path):
    """A changed figure, a unit that converts to the default and one that does not, each form."""
    page = tmp_path / "page.md"
    specs = all_option_specs()

    def check(text: str) -> tuple[list[str], int]:
        page.write_text(text)
        return wrong_typed_defaults(page, specs)

    assert check("every `flushIntervalMs` (`auto`), `leaseTimeout`, 10 s, then") == ([], 2)
    assert check("`spoolRetention` (default 7 days); `maxSpoolBytes` (default `4g`)") == ([], 2)
    assert check("`maxSpoolBytes` (default 4 GiB) and `captureIdleTimeout` (1 min)") == ([], 2)
    assert (
        check("| `receiveHighWaterMark` | x |\n|---|---|\n| 10,000 (the default) | y |\n")[1] == 1
    )
    wrong, _ = check("every `flushIntervalMs` (200 ms), `stalesMs` (3 s).")
    assert wrong == [
        "page.md:1: `flushIntervalMs` written '200 ms'; its default is 'auto' "
        "(auto or a positive integer (milliseconds))"
    ]
    for text in (
        "`leaseTimeout` (10 ms)",
        "`spoolRetention` (default `7h`)",
        "`maxSpoolBytes` (default 4 MiB)",
        "`capture` (`executors`)",
        "`stalesMs`, 3000 bytes,",
        "| `maxEndpoints` |\n|---|\n| 100 (the default) |\n",
    ):
        assert len(check(text)[0]) == 1, text
    assert check("`mode` (`spoolPath`, `x`), `node`, default `n`, `session` (5 s)") == ([], 0)
