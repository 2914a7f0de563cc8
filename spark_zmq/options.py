"""Options: how each is defined once (name, parser for its type and validation, default, doc),
the parsers, and the parsing of what a user gives into typed ``Options``.

Validation errors, the docs' options reference (``docs/options.md``, generated at build time)
and ``python -m spark_zmq options`` all come from the definitions, so an option cannot be
documented one way and parsed another. The options every format shares are in
``stream_options``; each protocol defines its own in ``protocols/<name>/options.py``.

An option is a module constant, added to its reader's or writer's tuple, and read by it::

    MAX_WIDGETS = Option("maxWidgets", positive_int, "a positive integer", "10", "What ...")
    READER_OPTIONS = (..., MAX_WIDGETS)
    options.get(MAX_WIDGETS)  # an int (with default None: an int | None)

Only the settings classes (``stream_settings``, each format's ``ReadSettings``/
``WriteSettings``) read ``Options``, once per query on the driver; everything else gets them.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast, overload

from spark_zmq.errors import OptionError

T = TypeVar("T")
V = TypeVar("V")
Parser = Callable[[str], T]


class Option(Generic[T]):
    """One user-facing option, whose value is of type ``T`` (as Flink's ``ConfigOption<T>``).

    ``parse`` turns the string Spark hands us into a typed value and raises ``ValueError`` when
    it cannot; ``accepts`` is the human description of valid values used in error messages.
    ``default`` is written as a user would write the option (it goes through ``parse`` too);
    ``None`` means "not set" (the code using the option decides what that means, as documented
    in ``doc``), and the option's type then includes None: ``Option("n", positive_int, ...,
    None, ...)`` is an ``Option[int | None]``, with default ``"1"`` an ``Option[int]``.
    Read a parsed value with ``Options.get(option)``. Invariant: immutable once made.
    """

    __slots__ = ("accepts", "default", "doc", "name", "parse")

    name: str
    parse: Callable[[str], Any]
    accepts: str
    default: str | None
    doc: str

    @overload
    def __init__(
        self: Option[V | None],
        name: str,
        parse: Callable[[str], V],
        accepts: str,
        default: None,
        doc: str,
    ) -> None: ...

    @overload
    def __init__(
        self: Option[V], name: str, parse: Callable[[str], V], accepts: str, default: str, doc: str
    ) -> None: ...

    def __init__(
        self,
        name: str,
        parse: Callable[[str], Any],
        accepts: str,
        default: str | None,
        doc: str,
    ) -> None:
        for attribute, value in (
            ("name", name),
            ("parse", parse),
            ("accepts", accepts),
            ("default", default),
            ("doc", doc),
        ):
            object.__setattr__(self, attribute, value)

    def __setattr__(self, attribute: str, value: object) -> None:
        raise AttributeError(f"option {self.name!r} is immutable")

    def __repr__(self) -> str:
        return f"Option({self.name!r})"

    def parsed_default(self) -> T:
        """The value of the option when not given."""
        return cast(T, None if self.default is None else self.parse(self.default))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Option, (self.name, self.parse, self.accepts, self.default, self.doc))


# ---------------------------------------------------------------------------------------------
# Parsers. Each raises ValueError; parse_options turns that into an OptionError naming the option.


def text(value: str) -> str:
    return value


def positive_int(value: str) -> int:
    number = int(value.strip())
    if number <= 0:
        raise ValueError("not positive")
    return number


def non_negative_int(value: str) -> int:
    number = int(value.strip())
    if number < 0:
        raise ValueError("negative")
    return number


def port(value: str) -> int:
    number = positive_int(value)
    if number > 65535:
        raise ValueError("not a port")
    return number


def positive_float(value: str) -> float:
    number = float(value.strip())
    if not (number > 0 and math.isfinite(number)):
        raise ValueError("not positive")
    return number


def non_negative_float(value: str) -> float:
    number = float(value.strip())
    if not (number >= 0 and math.isfinite(number)):
        raise ValueError("negative")
    return number


def boolean(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(value)


_DURATION_UNITS = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(value: str) -> float:
    """Seconds, from a number with an optional unit (ms, s, m, h, d): ``500ms``, ``30s``,
    ``15m``, ``7d``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(ms|s|m|h|d|)\s*", value.lower())
    if match is None:
        raise ValueError(value)
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
}


def byte_size(value: str) -> int:
    """``1048576``, ``512k``, ``64m``, ``4g`` (binary units, like Spark's size options)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", value)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(value)
    size = int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if size <= 0:
        raise ValueError(value)
    return size


def comma_list(value: str) -> tuple[str, ...]:
    """Comma-separated items, blanks around items ignored; empty items are an error."""
    items = tuple(item.strip() for item in value.split(","))
    if any(not item for item in items):
        raise ValueError("empty item")
    return items


def choice(*values: str) -> Callable[[str], str]:
    """Case-insensitive choice; returns the canonical spelling."""
    canonical = {v.lower(): v for v in values}

    def parse(value: str) -> str:
        return canonical[value.strip().lower()]

    return parse


# ---------------------------------------------------------------------------------------------


class Options:
    """Parsed options of one query (defaults filled in), read by their definitions:
    ``options.get(MODE)`` is typed as ``MODE`` is. Made by ``parse_options`` only, on the
    driver; the settings classes read it once and tasks get the settings, not this."""

    __slots__ = ("_by_name", "format_name", "given")

    def __init__(self, format_name: str, by_name: Mapping[str, Any], given: frozenset[str]) -> None:
        self.format_name = format_name
        self._by_name = dict(by_name)
        #: canonical names of the options the user gave
        self.given = given

    def get(self, option: Option[T]) -> T:
        """The value of ``option`` (its default when not given)."""
        if option.name not in self._by_name:
            raise OptionError(
                f"{self.format_name}: option '{option.name}' is not one of this format's "
                f"options (a fault of spark_zmq: the code reads an option it did not define)"
            )
        return cast(T, self._by_name[option.name])

    def defines(self, option: Option[Any]) -> bool:
        """True when ``option`` is one of this query's options (REQUEST_WRITER_OPTIONS are
        options of some writers only)."""
        return option.name in self._by_name

    def is_set(self, option: Option[Any]) -> bool:
        """True when the user gave the option (even if equal to the default)."""
        return option.name in self.given

    def given_values(self) -> dict[str, Any]:
        """The options the user gave, canonical name -> parsed value, in name order."""
        return {name: self._by_name[name] for name in sorted(self.given)}

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __repr__(self) -> str:
        return f"Options({self.format_name!r}, given={sorted(self.given)})"


#: options that Spark itself handles and passes on to a stream writer as well
SPARK_OWN_OPTIONS = frozenset({"checkpointlocation", "path", "queryname"})


def parse_options(
    format_name: str, specs: Sequence[Option[Any]], raw: Mapping[str, str]
) -> Options:
    """Validate ``raw`` (Spark's case-insensitive option map) against ``specs``.

    Raises OptionError for an unknown name (with a suggestion) or a value the option's parser
    rejects (naming the accepted values). Spark's own options are passed over.
    """
    by_lower = {spec.name.lower(): spec for spec in specs}
    values = {
        spec.name: None if spec.default is None else spec.parse(spec.default) for spec in specs
    }
    given: set[str] = set()
    for key, value in raw.items():
        spec = by_lower.get(key.lower())
        if spec is None and key.lower() in SPARK_OWN_OPTIONS:
            continue
        if spec is None:
            raise OptionError(_unknown_option_message(format_name, key, specs))
        try:
            values[spec.name] = spec.parse(str(value))
        except (ValueError, KeyError, TypeError) as exc:
            # a protocol's own error class (AddressError, ...) says what is wrong; a bare
            # ValueError from int() or float() would only repeat the value
            detail = "" if type(exc) in (ValueError, KeyError, TypeError) else f" ({exc})"
            raise OptionError(
                f"{format_name}: option '{spec.name}' must be {spec.accepts}; got {value!r}{detail}"
            ) from exc
        given.add(spec.name)
    return Options(format_name, values, frozenset(given))


def _unknown_option_message(format_name: str, key: str, specs: Iterable[Option[Any]]) -> str:
    names = sorted(spec.name for spec in specs)
    close = difflib.get_close_matches(key.lower(), [n.lower() for n in names], n=1)
    hint = ""
    if close:
        hint = f" Did you mean '{next(n for n in names if n.lower() == close[0])}'?"
    return f"{format_name}: unknown option '{key}'.{hint} Accepted options: {', '.join(names)}"


def option_table(specs: Sequence[Option[Any]]) -> str:
    """Markdown table of options, for docs and ``python -m spark_zmq options``."""
    lines = ["| option | accepts | default | meaning |", "|---|---|---|---|"]
    for spec in specs:
        default = "(not set)" if spec.default is None else f"`{spec.default}`"
        lines.append(f"| `{spec.name}` | {spec.accepts} | {default} | {spec.doc} |")
    return "\n".join(lines)
