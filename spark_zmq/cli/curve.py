"""CURVE flags for the shell tools, made from the reader and writer options' definitions.

``--curve-server-key``, ``--curve-public-key``, ``--curve-secret-key`` and
``--curve-client-keys`` take what the options ``curveServerKey`` ... take, are checked by the
same parsers and carry the same help, so a key that works in a query works on the command line.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from spark_zmq.options import Option
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.stream_options import CURVE_OPTIONS


def flag(option: Option[Any]) -> str:
    """``curveServerKey`` -> ``--curve-server-key``."""
    return "--" + re.sub(r"(?<!^)([A-Z])", r"-\1", option.name).lower()


def _checked(option: Option[Any]) -> Callable[[str], Any]:
    def parse(value: str) -> Any:
        try:
            return option.parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"must be {option.accepts}; got {value!r} ({exc})"
            ) from None

    return parse


def add_curve_arguments(parser: argparse.ArgumentParser) -> None:
    """The four CURVE flags, in a group of their own."""
    group = parser.add_argument_group("CURVE (encryption and authentication)")
    for option in CURVE_OPTIONS:
        group.add_argument(
            flag(option),
            dest=option.name,
            type=_checked(option),
            metavar="KEY" if option.name != "curveClientKeys" else "KEYS",
            help=option.doc,
        )


def curve_of(args: argparse.Namespace) -> Curve:
    """The Curve the flags describe (NO_CURVE when none is given)."""
    given = [getattr(args, option.name, None) for option in CURVE_OPTIONS]
    return Curve.of_keys(*given) if any(v is not None for v in given) else NO_CURVE
