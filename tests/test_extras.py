"""The optional dependencies (spark_zmq/extras.py, pyproject.toml's extras): without a format's
library every ``pyspark_*`` module still imports (Spark imports them all at a session's first
data source call), and using that format fails with an error that names the package and the
extra; without pyspark, the data sources say which Spark versions are supported.

Each case runs a fresh Python in which an import hook refuses the library, as if it were not
installed. tests/test_deploy.py installs the package for real with one extra only."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import tomllib

from support.common import ROOT

BLOCKER = """
import importlib.abc, sys
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
"""


def run_without(blocked: list[str], code: str) -> subprocess.CompletedProcess:
    program = f"BLOCKED = {blocked!r}\n{BLOCKER}\n{textwrap.dedent(code)}"
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.mark.parametrize("library", ["zeroconf", "pyre", "bson", "google.protobuf"])
def test_every_format_module_imports_without_another_formats_library(library):
    done = run_without(
        [library],
        """
        import pyspark_zeroeq, pyspark_yamz, pyspark_ebus, pyspark_goby
        import spark_zmq.cli
        print("imported", pyspark_yamz.DefaultSource.name())
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "imported yamz" in done.stdout


@pytest.mark.parametrize(
    ("fmt", "library", "distribution"),
    [
        ("zeroeq", "zeroconf", "zeroconf"),
        ("yamz", "pyre", "zeromq-pyre"),
        ("ebus", "bson", "pymongo"),
        ("goby", "google.protobuf", "protobuf"),
    ],
)
def test_a_format_without_its_library_fails_naming_the_package_and_the_extra(
    fmt, library, distribution
):
    done = run_without(
        [library],
        f"""
        from pyspark_{fmt} import DefaultSource
        from spark_zmq.errors import MissingDependency
        try:
            DefaultSource(options={{}}).reader_options()
        except MissingDependency as exc:
            print("refused:", exc)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert (
        f"refused: format('{fmt}') cannot run without the Python package '{distribution}'"
        in done.stdout
    )
    assert f"pip install 'spark_zmq[{fmt}]'" in done.stdout


def test_a_missing_library_is_not_taken_for_a_malformed_payload():
    """Decoding an EBUS frame without bson raises MissingDependency, not PayloadError (which
    would turn every row into a malformed one)."""
    done = run_without(
        ["bson"],
        """
        import zlib
        from spark_zmq.errors import MissingDependency
        from spark_zmq.protocols.ebus.wire import unpack
        try:
            unpack(zlib.compress(b"not read"), 1024)
        except MissingDependency as exc:
            print("missing:", exc)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "missing: spark_zmq cannot run without the Python package 'pymongo' (import bson)"
        in done.stdout
    )
    assert "spark_zmq[ebus] or spark_zmq[goby]" in done.stdout


def test_without_pyspark_the_data_sources_name_the_supported_versions():
    done = run_without(["pyspark"], "import pyspark_zeroeq")
    assert done.returncode != 0
    expected = "spark_zmq's data sources cannot run without the Python package 'pyspark'"
    assert f"MissingDependency: {expected}" in done.stderr
    assert "spark_zmq supports Spark 4.2 or later, before 5.0" in done.stderr


def test_the_extras_of_pyproject_are_the_ones_the_package_names():
    from spark_zmq.extras import EXTRAS

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra, modules in EXTRAS.items():
        names = {requirement.split(">")[0].split("<")[0] for requirement in declared[extra]}
        assert names == set(modules.values()), extra
    assert declared["all"] == [f"spark_zmq[{','.join(EXTRAS)}]"]


def test_the_command_line_needs_no_pyspark():
    """``spark-zmq job NAME`` serves a venv whose pyspark comes from the cluster at run time
    (docs/deploying.md)."""
    done = run_without(
        ["pyspark"],
        """
        import sys
        from spark_zmq.cli import run
        sys.argv = ["spark-zmq", "job", "capture_to_parquet"]
        run()
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("spark_zmq/jobs/capture_to_parquet.py")


def test_capture_the_capture_service_and_the_holder_process_need_no_pyspark():
    """A capture service (``spark-zmq capture``) and a holder process on an executor run
    capture outside Spark: they, every module of ``spark_zmq.capture`` and the spool's file
    contract import with pyspark missing (only ``capture=executors``'s claims are Spark's)."""
    done = run_without(
        ["pyspark"],
        """
        import importlib, pkgutil
        import spark_zmq.capture
        capture = sorted(
            m.name for m in pkgutil.iter_modules(spark_zmq.capture.__path__, "spark_zmq.capture.")
        )
        others = [
            "spark_zmq.placement.service",
            "spark_zmq.placement.executors.holder",
            "spark_zmq.spool.contract",
        ]
        for name in capture + others:
            importlib.import_module(name)
        print("imported", " ".join(capture + others))
        """,
    )
    assert done.returncode == 0, done.stderr
    imported = done.stdout.split()
    assert {"spark_zmq.capture.loop", "spark_zmq.placement.service"} <= set(imported), imported
