"""``python -m spark_zmq`` (or the ``spark-zmq`` command): tools around the connector.

``options [FORMAT]`` prints a format's options as a Markdown table, generated from their
definitions (the docs' options reference is this output). One package per format under
``spark_zmq.cli``, each with ``add_<format>_parser`` and ``run_<format>``: ``zeroeq ...`` speaks
ZeroEQ from a shell, ``ebus ...`` runs EBUS peers and asks brokers, ``goby ...`` runs a
stand-in gobyd and Goby clients, ``yamz ...`` browses a Zyre network and reads yamz addresses.
``discover`` lists the endpoints a stream of any format would read (``spark_zmq.cli.discover``),
``capture`` runs a capture service that fills a spool without a query and ``readers`` lists the
queries that read one (``spark_zmq.cli.capture``), ``metrics-targets`` where a spool's capture
processes serve their metrics (``spark_zmq.cli.monitoring``),
``demo`` runs demo peers of a format (``spark_zmq.cli.demo``), ``doctor`` checks what this host
gives the formats (``spark_zmq.cli.doctor``), ``job NAME`` prints the path of a job's file for
spark-submit (``spark_zmq.jobs``).
"""

from __future__ import annotations

import argparse
import importlib.util
import pkgutil
import sys
from pathlib import Path

from spark_zmq import __version__
from spark_zmq.cli.capture import add_capture_parser, add_readers_parser, run_capture, run_readers
from spark_zmq.cli.demo import add_demo_parser, run_demo
from spark_zmq.cli.discover import add_discover_parser, run_discover
from spark_zmq.cli.doctor import add_doctor_parser, run_doctor
from spark_zmq.cli.ebus import add_ebus_parser, run_ebus
from spark_zmq.cli.goby import add_goby_parser, run_goby
from spark_zmq.cli.monitoring import add_metrics_targets_parser, run_metrics_targets
from spark_zmq.cli.yamz import add_yamz_parser, run_yamz
from spark_zmq.cli.zeroeq import add_zeroeq_parser, run_zeroeq
from spark_zmq.log import configure_logging
from spark_zmq.options import option_table
from spark_zmq.protocols.contract import SinkProtocol, StreamProtocol
from spark_zmq.protocols.ebus import EBus
from spark_zmq.protocols.goby import Goby
from spark_zmq.protocols.yamz import Yamz
from spark_zmq.protocols.zeroeq import ZeroEQ
from spark_zmq.stream_options import READER_OPTIONS, WRITER_OPTIONS

#: the formats by name (the CLI needs no pyspark: ``spark-zmq job NAME`` also serves a Python
#: whose pyspark comes from the cluster's Spark at run time)
FORMATS: dict[str, StreamProtocol] = {p.name: p for p in (ZeroEQ(), EBus(), Goby(), Yamz())}
#: how each tool subcommand runs its parsed arguments
RUNNERS = {
    "zeroeq": run_zeroeq,
    "ebus": run_ebus,
    "goby": run_goby,
    "yamz": run_yamz,
    "discover": lambda args: run_discover(args, FORMATS),
    "capture": lambda args: run_capture(args, FORMATS),
    "readers": run_readers,
    "metrics-targets": run_metrics_targets,
    "demo": run_demo,
    "doctor": run_doctor,
}


def options_markdown(format_name: str, shared: bool = True) -> str:
    """The option tables of a format: its own, after the generic reader's and writer's unless
    ``shared`` is False."""
    protocol = FORMATS[format_name]
    tables = []
    if shared:
        tables.append(("every format's reader", READER_OPTIONS))
    tables.append((f"the `{format_name}` reader", protocol.reader_options))
    if isinstance(protocol, SinkProtocol):
        if shared:
            tables.append(("every format's writer", WRITER_OPTIONS))
        tables.append((f"the `{format_name}` writer", protocol.writer_options))
    return "\n".join(f"Options of {title}:\n\n{option_table(specs)}\n" for title, specs in tables)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m spark_zmq`` with every subcommand (the docs' CLI reference is
    rendered from it)."""
    parser = argparse.ArgumentParser(prog="python -m spark_zmq", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"spark_zmq {__version__}")
    parser.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        type=str.upper,
        help="the package's log lines on stderr from this level on (default: "
        "SPARK_ZMQ_LOG_LEVEL, else WARNING)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    options = commands.add_parser("options", help="print a format's options (Markdown)")
    options.add_argument("format", nargs="?", default="zeroeq", choices=sorted(FORMATS))
    options.add_argument(
        "--own", action="store_true", help="only the format's own options, not the generic ones"
    )
    job = commands.add_parser("job", help="print the path of a job's file, for spark-submit")
    job.add_argument("name", choices=job_files())
    add_zeroeq_parser(commands)
    add_ebus_parser(commands)
    add_goby_parser(commands)
    add_yamz_parser(commands)
    add_discover_parser(commands, sorted(FORMATS))
    add_capture_parser(commands, sorted(FORMATS))
    add_readers_parser(commands)
    add_metrics_targets_parser(commands)
    add_demo_parser(commands)
    add_doctor_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, default="WARNING")  # stdout is for results
    if args.command == "job":
        print(job_files()[args.name])
        return 0
    if args.command == "options":
        sys.stdout.write(options_markdown(args.format, shared=not args.own))
        return 0
    return RUNNERS[args.command](args)


def job_files() -> dict[str, str]:
    """The jobs of ``spark_zmq.jobs`` (which sit above the command line: they use it) by name,
    with their files, found without importing them."""
    spec = importlib.util.find_spec("spark_zmq.jobs")
    folders = list(spec.submodule_search_locations or []) if spec else []
    return {
        module.name: str(Path(folders[0]) / f"{module.name}.py")
        for module in pkgutil.iter_modules(folders)
    }


def run() -> None:
    """The ``spark-zmq`` console script."""
    sys.exit(main())
