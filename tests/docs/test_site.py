"""The docs site builds with warnings as errors (broken links and anchors included), and what it
generates is there: every option of every format, every command of the CLI, the notebooks with
the outputs of a run, and nothing loaded from outside the site.

The build runs last in the suite (tests/conftest.py): it renders the notebooks that
tests/jobs/test_notebooks.py executed and checked in this run; without them the build runs that
test itself."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

from spark_zmq.cli import FORMATS, build_parser
from spark_zmq.protocols.contract import SinkProtocol
from spark_zmq.stream_options import READER_OPTIONS, WRITER_OPTIONS
from support.common import ROOT

#: what a page may not load from another host: scripts, stylesheets, images, frames, modules
EXTERNAL_LOAD = re.compile(
    r"<(?:script|img|iframe)[^>]*\ssrc=\"(?:https?:)?//"
    r"|<link[^>]*\shref=\"(?:https?:)?//"
    r"|import\(\s*[\"'](?:https?:)?//"
    r"|@import\s+url\(\s*[\"']?(?:https?:)?//"
)


def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-6000:]}"
    return target


def text_of(page: Path) -> str:
    return unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def option_rows(page: Path) -> set[str]:
    """The options named in the first cell of a table row of a page."""
    return set(re.findall(r"<tr>\s*<td><code>(\w+)</code></td>", page.read_text()))


@pytest.mark.last
def test_every_option_is_in_the_options_page_and_its_formats_page(site):
    in_options_page = option_rows(site / "options" / "index.html")
    shared = {spec.name for spec in (*READER_OPTIONS, *WRITER_OPTIONS)}
    assert shared <= in_options_page
    for name, protocol in FORMATS.items():
        own = {spec.name for spec in protocol.reader_options}
        if isinstance(protocol, SinkProtocol):
            own |= {spec.name for spec in protocol.writer_options}
        assert own <= in_options_page, name
        assert own <= option_rows(site / "formats" / name / "index.html"), name
    # what a table says in angle brackets is text, not a tag that the browser hides
    assert '{"<partition>": offset}' in text_of(site / "options" / "index.html")


@pytest.mark.last
def test_every_command_is_in_the_cli_reference(site):
    page = text_of(site / "reference" / "cli" / "index.html")
    found = []

    def walk(parser):
        found.append(parser.prog)
        for _, sub in hooks().subcommands(parser):
            walk(sub)

    walk(build_parser())
    assert len(found) > 15
    for prog in found:
        assert f"usage: {prog}" in page, prog


@pytest.mark.last
def test_the_notebooks_are_pages_with_their_outputs(site):
    for source in sorted((ROOT / "notebooks").glob("*.ipynb")):
        page = (site / "notebooks" / source.stem / "index.html").read_text()
        assert "data:image/png;base64," in page, f"{source.name}: no plot in its page"
        assert re.search(r"sent \d+ messages, the query has \d+ rows", page), source.name
        assert "+----" in page, f"{source.name}: no table in its page"


@pytest.mark.last
def test_the_site_loads_nothing_from_other_hosts(site):
    loads = []
    for page in site.rglob("*.html"):
        found = EXTERNAL_LOAD.finditer(page.read_text())
        loads += [f"{page.relative_to(site)}: {match.group(0)}" for match in found]
    assert not loads, "\n".join(loads)


def test_the_external_load_check_can_fail():
    assert EXTERNAL_LOAD.search('<script src="https://cdn.example/x.js"></script>')
    assert EXTERNAL_LOAD.search('<link rel="stylesheet" href="//fonts.example/css">')
    assert not EXTERNAL_LOAD.search('<a href="https://example.org/">a link</a>')
    assert not EXTERNAL_LOAD.search('<script src="../assets/javascripts/bundle.js"></script>')


@pytest.mark.last
def test_the_readmes_links_lead_to_pages_and_anchors_of_the_site(site):
    """The README is not part of the site, so mkdocs does not check its links: this does."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", (ROOT / "README.md").read_text())
    assert len(links) > 15
    for target, anchor in links:
        if re.match(r"https?://", target):
            continue
        assert (ROOT / target).exists(), target
        if target.startswith("docs/") and target.endswith(".md"):
            page = target[len("docs/") : -len(".md")]
            html = site / ("index.html" if page == "index" else f"{page}/index.html")
            assert html.is_file(), target
            if anchor:
                assert f'id="{anchor}"' in html.read_text(), f"{target}#{anchor}"


@pytest.mark.last
def test_every_format_page_lists_its_columns_with_their_spark_types(site):
    """The columns tables are generated from the reader's schema: every column is there with
    the type Spark shows for it."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_zmq.spark.rows import output_schema

    for name, protocol in FORMATS.items():
        page = (site / "formats" / name / "index.html").read_text()
        for field in from_arrow_schema(output_schema(protocol)).fields:
            kind = re.escape(field.dataType.simpleString())
            row = rf"<tr>\s*<td><code>{field.name}</code></td>\s*<td><code>{kind}</code></td>"
            assert re.search(row, unescape(page)), f"formats/{name}: column {field.name}"
