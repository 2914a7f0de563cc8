"""``python -m spark_zmq``: tools around the connector.

``options [FORMAT]`` prints a format's options as a Markdown table, generated from their
definitions (the README's tables are this output).
"""

from __future__ import annotations

import argparse
import sys

from .datasource import ZeroEQDataSource
from .options import READER_OPTIONS, option_table

FORMATS = {source.name(): source.protocol for source in (ZeroEQDataSource,)}


def options_markdown(format_name: str) -> str:
    protocol = FORMATS[format_name]
    return (f"Options of every format's reader:\n\n{option_table(READER_OPTIONS)}\n\n"
            f"Options of `{format_name}`:\n\n{option_table(protocol.reader_options)}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_zmq", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    options = commands.add_parser("options", help="print a format's options (Markdown)")
    options.add_argument("format", nargs="?", default="zeroeq", choices=sorted(FORMATS))
    args = parser.parse_args(argv)
    if args.command == "options":
        sys.stdout.write(options_markdown(args.format))
    return 0
