"""The optional dependencies: an extra per format for the libraries that serve that format only,
and ``spark`` for pyspark, which a Spark runtime may provide itself.

- A module that needs a format's library imports it with ``optional``: without the library the
  import still succeeds (Spark imports every ``pyspark_*`` module at a session's first data
  source call, and one failing import would break every format of the session), and the first
  use raises ``MissingDependency`` naming the package and the extra to install.
- ``require(extra)`` raises that error up front: the data sources call it when a query is
  defined, so a missing library is reported there rather than in a capture thread.
- ``require("spark")`` also checks that the pyspark on the path (installed, or the one a Spark
  runtime puts on ``PYTHONPATH``) is a version this package supports.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from types import ModuleType
from typing import Any

from spark_zmq.errors import MissingDependency

#: the Spark versions this package supports: [first, last) as (major, minor)
SPARK_VERSIONS = ((4, 2), (5, 0))
#: extra -> {import name: the distribution that provides it}; a format needs the extra of its
#: name (the data sources call require(format name)); pyproject.toml's extras match (a test says)
EXTRAS: dict[str, dict[str, str]] = {
    "spark": {"pyspark": "pyspark"},
    "zeroeq": {"zeroconf": "zeroconf"},
    "yamz": {"pyre": "zeromq-pyre"},
    "ebus": {"bson": "pymongo"},
    "goby": {"google.protobuf": "protobuf", "bson": "pymongo"},
}


def _provider(module: str) -> tuple[str, str, list[str]]:
    """The import name that ``module`` is (or is a submodule of), its distribution, and the
    extras that bring it."""
    for modules in EXTRAS.values():
        for top, distribution in modules.items():
            if module == top or module.startswith(top + "."):
                return top, distribution, [e for e in EXTRAS if top in EXTRAS[e]]
    raise ValueError(f"{module} is not an optional dependency of spark_zmq (see EXTRAS)")


def _missing(
    module: str,
    extras: list[str] | None = None,
    cause: BaseException | None = None,
    needed_by: str = "spark_zmq",
) -> MissingDependency:
    top, distribution, providers = _provider(module)
    names = " or ".join(f"spark_zmq[{extra}]" for extra in (extras or providers))
    first = f"spark_zmq[{(extras or providers)[0]}]"
    why = f" ({cause})" if cause is not None and not isinstance(cause, ModuleNotFoundError) else ""
    versions = f"; spark_zmq supports {supported_spark()}" if top == "pyspark" else ""
    return MissingDependency(
        f"{needed_by} cannot run without the Python package {distribution!r} (import "
        f"{top}), which this Python cannot import{why}: install {names} (pip install "
        f"'{first}'), or {distribution} itself, in the Python that runs the query (on a "
        f"cluster: the driver's and the executors', see PYSPARK_PYTHON){versions}"
    )


class _MissingModule(ModuleType):
    """Stands for a module that could not be imported: any use raises MissingDependency."""

    def __init__(self, module: str, cause: ImportError) -> None:
        super().__init__(module)
        self._error = _missing(module, cause=cause)
        self._cause = cause

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise self._error from self._cause


def optional(module: str) -> ModuleType:
    """``module`` (an optional dependency, or a submodule of one) imported, or a stand-in
    whose first use says what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        return _MissingModule(module, exc)


def importable(module: str) -> bool:
    """Whether ``module`` can be found (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is missing
        return False


def missing(extra: str, needed_by: str = "spark_zmq") -> list[MissingDependency]:
    """What ``extra`` needs and this Python cannot import (empty when all is there);
    ``needed_by`` names what needs it in the errors (a format, the data sources)."""
    problems = []
    for module in EXTRAS[extra]:
        if not importable(module):
            problems.append(_missing(module, [extra], needed_by=needed_by))
        elif extra == "spark":
            problems += _spark_version_problems()
    return problems


def require(extra: str, needed_by: str = "spark_zmq") -> None:
    """Raise MissingDependency if this Python lacks something ``extra`` brings."""
    problems = missing(extra, needed_by)
    if problems:
        raise problems[0]


def supported_spark() -> str:
    (first_major, first_minor), (end_major, _) = SPARK_VERSIONS
    return f"Spark {first_major}.{first_minor} or later, before {end_major}.0"


def _spark_version_problems() -> list[MissingDependency]:
    from pyspark.version import __version__ as version

    found = re.match(r"(\d+)\.(\d+)", version)
    numbers = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    first, end = SPARK_VERSIONS
    if first <= numbers < end:
        return []
    return [
        MissingDependency(
            f"spark_zmq supports {supported_spark()}; this Python imports pyspark {version}: "
            f"install spark_zmq[spark] in a Python of its own, or run on a supported Spark "
            f"runtime"
        )
    ]
