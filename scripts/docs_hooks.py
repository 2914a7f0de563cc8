"""mkdocs hooks (mkdocs.yml, ``hooks:``): the parts of the docs site that are generated at build
time from the one place they are defined, so that they cannot drift from the package.

- ``<!-- generated:options NAME -->`` in a page becomes the option tables of format NAME (its
  own options, as ``python -m spark_zmq options NAME --own`` prints them), and
  ``<!-- generated:options shared -->`` the tables of the options every format shares: both from
  ``spark_zmq.cli.options_markdown`` and ``spark_zmq.options.option_table``, the functions the
  CLI prints with.
- ``<!-- generated:columns NAME -->`` becomes the table of the columns of format NAME's rows,
  with their Spark SQL types, from the schema the reader gives Spark
  (``spark_zmq.spark.rows.output_schema``, through pyspark's ``from_arrow_schema``).
- ``<!-- generated:cli -->`` becomes the command line reference: the help of every command and
  subcommand, rendered from ``spark_zmq.cli.build_parser()``, the parser the CLI runs.
- The notebooks (``notebooks/*.ipynb``) join the site as pages, rendered by mkdocs-jupyter
  *with their outputs*, from the executed copies that ``tests/jobs/test_notebooks.py`` saves in
  ``build/notebooks/`` after checking them. A copy whose source notebook changed since (its
  ``source_sha256``) does not count. When any is missing, the build runs that test itself
  (``scripts/test.sh``, so in the private network namespace) and fails, saying how to make
  them, when they are still missing.
- The notebook pages lose the loaders of MathJax and Mermaid that nbconvert writes into every
  page (their URLs are on a CDN, and the notebooks use neither): the site loads nothing from
  outside.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import subprocess
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
#: where tests/jobs/test_notebooks.py saves the executed notebooks (git-ignored)
EXECUTED = ROOT / "build" / "notebooks"
#: the metadata key of an executed copy that holds its source's digest
SOURCE_KEY = "spark_zmq_docs"
GENERATED = re.compile(r"<!-- generated:(options|columns|cli)(?: (\w+))? -->")
#: width of the CLI reference's help texts
CLI_COLUMNS = 96

log = logging.getLogger("mkdocs.hooks.spark_zmq")


# ---------------------------------------------------------------------------------------------
# Options and the CLI


def escape_outside_code(markdown: str) -> str:
    """``<`` as text, outside code spans: the CLI prints Markdown for a terminal, where
    ``{"<partition>": offset}`` is plain text, but in a page ``<partition>`` would be a tag."""
    parts = re.split(r"(`[^`\n]*`)", markdown)
    return "".join(part if part.startswith("`") else part.replace("<", "&lt;") for part in parts)


def options_section(name: str) -> str:
    """The option tables of a format (its own) or, for ``shared``, the generic reader's and
    writer's, as the CLI prints them."""
    from spark_zmq.cli import options_markdown
    from spark_zmq.options import option_table
    from spark_zmq.stream_options import READER_OPTIONS, WRITER_OPTIONS

    if name == "shared":
        return escape_outside_code(
            f"Options of every format's reader:\n\n{option_table(READER_OPTIONS)}\n\n"
            f"Options of every format's writer:\n\n{option_table(WRITER_OPTIONS)}\n"
        )
    return escape_outside_code(options_markdown(name, shared=False))


def columns_section(name: str) -> str:
    """The columns of a format's rows with their Spark SQL types, as ``df.printSchema()`` would
    name them, from the schema that the format's reader gives Spark: the shared columns first."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from spark_zmq.cli import FORMATS
    from spark_zmq.spark.rows import SHARED_COLUMNS, output_schema

    schema = from_arrow_schema(output_schema(FORMATS[name]))
    rows = [
        f"| `{field.name}` | `{field.dataType.simpleString()}` | "
        f"{'every format' if field.name in SHARED_COLUMNS.names else name} |"
        for field in schema.fields
    ]
    return "\n".join(["| column | type | from |", "|---|---|---|", *rows]) + "\n"


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """The parser's subcommands in the order they were added, with their help lines."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            found += [(helps.get(name) or "", sub) for name, sub in action.choices.items()]
    return found


def cli_markdown() -> str:
    """Every command's ``--help``, one section per command, subcommands nested under theirs."""
    from spark_zmq.cli import build_parser

    sections = []

    def walk(parser: argparse.ArgumentParser, summary: str, depth: int) -> None:
        heading = "#" * min(depth, 4)
        lines = [f"{heading} `{parser.prog}`", ""]
        if summary:
            lines += [summary[0].upper() + summary[1:] + ".", ""]
        lines += ["```text", parser.format_help().rstrip(), "```", ""]
        sections.append("\n".join(lines))
        for help_line, sub in subcommands(parser):
            walk(sub, help_line, depth + 1)

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(CLI_COLUMNS)  # argparse wraps help at the terminal's width
    try:
        walk(build_parser(), "", 2)
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(sections)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def generate(match: re.Match) -> str:
        kind, name = match.groups()
        if kind == "cli":
            return cli_markdown()
        if kind == "columns":
            from spark_zmq.cli import FORMATS

            if name not in FORMATS:
                raise PluginError(f"{page.file.src_uri}: {match.group(0)}: no format {name!r}")
            return columns_section(name)
        if not name:
            raise PluginError(f"{page.file.src_uri}: {match.group(0)} names no format")
        from spark_zmq.cli import FORMATS

        if name != "shared" and name not in FORMATS:
            raise PluginError(
                f"{page.file.src_uri}: {match.group(0)}: no format {name!r} "
                f"(formats: {', '.join(sorted(FORMATS))}, or shared)"
            )
        return options_section(name)

    return GENERATED.sub(generate, markdown)


# ---------------------------------------------------------------------------------------------
# The notebooks


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def executed_copy(source: Path) -> Path | None:
    """The executed copy of a notebook, if there is one made from its current source."""
    copy = EXECUTED / source.name
    if not copy.is_file():
        return None
    try:
        made_from = json.loads(copy.read_text())["metadata"][SOURCE_KEY]["source_sha256"]
    except (ValueError, KeyError, TypeError):
        return None
    return copy if made_from == source_digest(source) else None


def missing_notebooks() -> list[Path]:
    return [source for source in sorted(NOTEBOOKS.glob("*.ipynb")) if not executed_copy(source)]


def execute_notebooks(missing: list[Path]) -> None:
    """Runs the notebook test, which executes every notebook and saves the copies it checked."""
    names = ", ".join(path.name for path in missing)
    log.info("no executed copy of %s in %s: running tests/jobs/test_notebooks.py", names, EXECUTED)
    command = [
        "bash",
        str(ROOT / "scripts" / "test.sh"),
        "tests/jobs/test_notebooks.py",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        log.warning("tests/jobs/test_notebooks.py failed:\n%s", result.stdout[-4000:])


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns .ipynb files into pages
def on_files(files: Files, config) -> Files:
    missing = missing_notebooks()
    if missing and os.environ.get("SPARK_ZMQ_DOCS_EXECUTE", "1") != "0":
        execute_notebooks(missing)
        missing = missing_notebooks()
    if missing:
        raise PluginError(
            f"no executed copy of {', '.join(p.name for p in missing)} in {EXECUTED}: the site "
            "shows the notebooks with their outputs. Make them with `bash scripts/test.sh "
            "tests/jobs/test_notebooks.py` (it runs every notebook and saves what it checked)"
        )
    for source in sorted(NOTEBOOKS.glob("*.ipynb")):
        # a file of its own folder, not a generated one: mkdocs-jupyter's wrapper finds the
        # notebook through src_dir (EXECUTED's parent, so that its page is notebooks/NAME/)
        files.append(
            File(
                f"{EXECUTED.name}/{source.name}",
                src_dir=str(EXECUTED.parent),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files


#: what nbconvert puts in every notebook page to load MathJax and Mermaid from a CDN
CDN_LOADERS = (
    re.compile(r'<!-- Load mathjax -->\s*<script src="[^"]*">\s*</script>'),
    re.compile(
        r'<!-- MathJax configuration -->\s*<script type="text/x-mathjax-config">.*?</script>', re.S
    ),
    re.compile(r'<script type="module">(?:(?!</script>).)*?mermaid.*?</script>', re.S),
)


def on_page_content(html: str, page, config, files) -> str:
    if page.file.src_uri.endswith(".ipynb"):
        for loader in CDN_LOADERS:
            html = loader.sub("", html)
    return html
