"""What every tool of the command line shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from spark_zmq import options
from spark_zmq.errors import SparkZmqError

T = TypeVar("T")


class CommandError(SparkZmqError):
    """A failure the user can act on: one line on stderr and exit ``status`` instead of a
    traceback (2 for a usage error found after parsing, 1 for anything else)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def aligned(head: Sequence[str], lines: Iterable[Sequence[str]]) -> str:
    """Plain columns aligned under ``head``: readable in a terminal, easy to grep or cut."""
    cells = [list(head), *(list(line) for line in lines)]
    widths = [max(len(cell) for cell in column) for column in zip(*cells)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells
    )


def option_arg(value: str) -> tuple[str, str]:
    """An argparse type: ``KEY=VALUE``, a format's option as a tool or job takes it."""
    key, equals, setting = value.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return key, setting


def add_format_options(
    parser: argparse.ArgumentParser, flag: str = "--option", help: str = "a reader option"
) -> None:
    """A repeatable ``flag KEY=VALUE`` whose values collect, in order, as (key, value) pairs."""
    parser.add_argument(
        flag, action="append", type=option_arg, default=[], metavar="KEY=VALUE", help=help
    )


class MemoryState:
    """Discovery's durable state, kept in memory: a tool leaves nothing behind."""

    def __init__(self) -> None:
        self.data: dict | None = None

    def load(self) -> dict | None:
        return self.data

    def save(self, data: dict) -> None:
        self.data = data


def arg_type(parse: Callable[[str], T], accepts: str) -> Callable[[str], T]:
    """An argparse type from one of the options' parsers: the same values are accepted, and a
    bad one is a usage error naming the argument and saying what it takes."""

    def convert(value: str) -> T:
        try:
            return parse(value)
        except (ValueError, KeyError):
            raise argparse.ArgumentTypeError(f"{value!r} is not {accepts}") from None

    convert.__name__ = getattr(parse, "__name__", "value")  # argparse names it in errors
    return convert


#: the argument types the tools share, from the options' parsers
count_arg = arg_type(options.positive_int, "a whole number of at least 1")
port_arg = arg_type(options.port, "a TCP port")
any_port_arg = arg_type(
    lambda value: options.port(value) if value.strip() != "0" else 0,
    "a TCP port (0 = any free port)",
)
seconds_arg = arg_type(options.non_negative_float, "a number of seconds (0 or more)")
positive_seconds_arg = arg_type(options.positive_float, "a number of seconds (more than 0)")
positive_rate_arg = arg_type(options.positive_float, "a rate per second (more than 0)")
