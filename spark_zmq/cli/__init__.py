"""``python -m spark_zmq``: tools around the connector.

``options [FORMAT]`` prints a format's options as a Markdown table, generated from their
definitions (the README's tables are this output). ``zeroeq ...`` speaks ZeroEQ from a shell
(``spark_zmq.cli.zeroeq``).
"""

from __future__ import annotations

import argparse
import sys

from ..datasource import ZeroEQDataSource
from ..options import READER_OPTIONS, WRITER_OPTIONS, option_table
from .zeroeq import add_zeroeq_parser, run_zeroeq

FORMATS = {source.name(): source.protocol for source in (ZeroEQDataSource,)}


def options_markdown(format_name: str) -> str:
    protocol = FORMATS[format_name]
    return (f"Options of every format's reader:\n\n{option_table(READER_OPTIONS)}\n\n"
            f"Options of the `{format_name}` reader:\n\n"
            f"{option_table(protocol.reader_options)}\n\n"
            f"Options of every format's writer:\n\n{option_table(WRITER_OPTIONS)}\n\n"
            f"Options of the `{format_name}` writer:\n\n"
            f"{option_table(protocol.writer_options)}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_zmq",
                                     description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    options = commands.add_parser("options", help="print a format's options (Markdown)")
    options.add_argument("format", nargs="?", default="zeroeq", choices=sorted(FORMATS))
    add_zeroeq_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "options":
        sys.stdout.write(options_markdown(args.format))
        return 0
    return run_zeroeq(args)
