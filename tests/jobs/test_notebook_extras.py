"""The notebooks' install line (``pip install '.[spark,<format>,notebooks]'`` in the first cell)
installs what each notebook imports: every extra it names exists in pyproject.toml, and the
package's dependencies with those extras provide every third-party module the notebook imports,
directly (matplotlib for the plot) or through the package's own modules it uses (a format's
library, pyspark).

Read without running anything: the notebooks' JSON and the package's sources are parsed, and
``importlib.metadata.packages_distributions()`` says which distribution provides an import
name (a distribution brings what it requires, as pip installs it). A package module's imports
count wherever they are (in a function too), as do its ``optional("...")`` libraries
(spark_zmq/extras.py). tests/jobs/test_notebooks.py runs the notebooks."""

from __future__ import annotations

import ast
import json
import re
import sys
from collections import deque
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from support.common import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
INSTALL_LINE = re.compile(r"pip install '\.\[([\w,-]+)\]'")
#: a requirement's distribution name and its extras, e.g. ``spark_zmq[all]`` or ``pyre>=0.3``
REQUIREMENT = re.compile(r"([A-Za-z0-9._-]+)(?:\[([\w,-]+)\])?")
#: the package's own top-level modules (the data sources Spark imports by name)
OWN = {"spark_zmq"} | {path.stem for path in ROOT.glob("pyspark_*.py")}


def canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def distributions(extras: list[str]) -> set[str]:
    """The distributions that installing the package with ``extras`` brings (canonical names;
    an extra naming the package itself, ``spark_zmq[...]``, is followed)."""
    found: set[str] = set()
    requirements = list(PROJECT["dependencies"])
    seen: set[str] = set()
    pending = deque(extras)
    while pending:
        extra = pending.popleft()
        if extra in seen:
            continue
        seen.add(extra)
        requirements += PROJECT["optional-dependencies"][extra]
        for requirement in PROJECT["optional-dependencies"][extra]:
            name, more = REQUIREMENT.match(requirement).groups()  # type: ignore[union-attr]
            if canonical(name) == "spark-zmq":
                pending.extend((more or "").split(","))
    for requirement in requirements:
        name = REQUIREMENT.match(requirement).group(1)  # type: ignore[union-attr]
        if canonical(name) != "spark-zmq":
            found |= with_their_requirements(name)
    return found


def with_their_requirements(distribution: str) -> set[str]:
    """``distribution`` and what its installed metadata says it requires here (this Python,
    no extras of its own), transitively: what pip installs with it."""
    found: set[str] = set()
    pending = deque([distribution])
    while pending:
        name = canonical(pending.popleft())
        if name in found:
            continue
        found.add(name)
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: its own name is all that is known
        for text in requirements:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return found


def install_line(notebook: dict) -> list[str]:
    """The extras named by the ``pip install '.[...]'`` of the notebook's first cell."""
    first = "".join(notebook["cells"][0]["source"])
    match = INSTALL_LINE.search(first)
    assert match, f"no `pip install '.[...]'` in the first cell: {first[:300]!r}"
    return match.group(1).split(",")


def notebook_code(notebook: dict) -> str:
    """The code cells as Python (IPython's ``%`` and ``!`` lines left out)."""
    lines = [
        line
        for cell in notebook["cells"]
        if cell["cell_type"] == "code"
        for line in "".join(cell["source"]).splitlines()
        if not line.lstrip().startswith(("%", "!"))
    ]
    return "\n".join(lines)


def imports(tree: ast.AST) -> set[str]:
    """Every module ``tree`` imports (anywhere in it), with ``from a import b`` also giving
    ``a.b`` (a module, if it is one), and every ``optional("name")`` library."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "optional"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


def own_source(module: str) -> Path | None:
    """The file of one of the package's Python modules; None for anything else (a submodule
    name that is an attribute, a compiled module)."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def third_party_imports(code: str) -> dict[str, str]:
    """The third-party top-level modules ``code`` needs, each with the module that imports it:
    its own imports, and those of the package's modules it reaches, followed transitively (a
    ``format("name")`` of one of the package's formats reaches ``spark_zmq.protocols.name``)."""
    needed: dict[str, str] = {}
    pending = deque(("the notebook", name) for name in imports(ast.parse(code)))
    for fmt in re.findall(r"\.format\([\"'](\w+)[\"']\)", code):
        pending.append(("the notebook", f"spark_zmq.protocols.{fmt}"))
    visited: set[str] = set()
    while pending:
        importer, module = pending.popleft()
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top == "__future__":
            continue
        if top not in OWN:
            needed.setdefault(top, importer)
            continue
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):  # a module imports its packages first
            name = ".".join(parts[:depth])
            source = own_source(name)
            if name in visited or source is None:
                continue
            visited.add(name)
            pending.extend((name, imported) for imported in imports(ast.parse(source.read_text())))
    return needed


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_a_notebooks_install_line_installs_what_it_imports(path):
    notebook = json.loads(path.read_text())
    extras = install_line(notebook)
    unknown = [extra for extra in extras if extra not in PROJECT["optional-dependencies"]]
    assert not unknown, (
        f"{path.name}: its install line names extras pyproject.toml lacks: {unknown}"
    )
    installed = distributions(extras)
    providers = metadata.packages_distributions()
    missing = []
    for module, importer in sorted(third_party_imports(notebook_code(notebook)).items()):
        provided_by = {canonical(d) for d in providers.get(module, [])}
        assert provided_by, f"{path.name}: no installed distribution provides {module!r}"
        if not provided_by & installed:
            names = " or ".join(sorted(provided_by))
            missing.append(f"{module} (imported by {importer}; distribution {names})")
    assert not missing, (
        f"{path.name}: its install line '.[{','.join(extras)}]' does not install: "
        + "; ".join(missing)
        + " -- add it to one of those extras in pyproject.toml, or name the extra that has it"
    )


def test_the_check_sees_a_missing_library_and_a_format_behind_its_name():
    """The walk finds a library the notebook imports and the format library that ``format``
    reaches, and the install line's extras without it do not provide it."""
    needed = third_party_imports('import matplotlib.pyplot\nspark.readStream.format("ebus")')
    assert {"matplotlib", "bson", "pyspark", "zmq"} <= set(needed), needed
    assert needed["matplotlib"] == "the notebook"
    assert "pymongo" not in distributions(["spark", "zeroeq"])
    assert "pymongo" in distributions(["spark", "ebus"])
