"""The README's promises: its options table is generated, its examples and main job run."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from spark_zmq.cli import FORMATS, options_markdown
from support.common import ROOT


def test_readme_options_tables_are_generated_from_the_definitions():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"<!-- options:(\w+)( own)? -->\n(.*?)<!-- /options -->", readme, re.S)
    assert {name for name, _, _ in blocks} == set(FORMATS)
    for name, own, table in blocks:
        assert table == options_markdown(name, shared=not own), name


def test_cli_prints_options():
    out = subprocess.run(
        [sys.executable, "-m", "spark_zmq", "options", "zeroeq"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "| `maxRecordsPerTrigger` |" in out and "| `session` |" in out


#: an example block: the code, then what it prints
EXAMPLE = re.compile(
    r"<!-- example:(\w+) -->\n```python\n(.*?)```\n.*?```\n(.*?)```\n"
    r"<!-- /example -->",
    re.S,
)


def readme_examples() -> list:
    return [
        pytest.param(code, printed, id=name)
        for name, code, printed in EXAMPLE.findall((ROOT / "README.md").read_text())
    ]


@pytest.mark.spark
@pytest.mark.parametrize("code, printed", readme_examples())
def test_readme_example_prints_what_the_readme_shows(code, printed, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert printed in result.stdout, result.stdout


def test_the_readme_has_examples():
    assert [param.id for param in readme_examples()] == ["ebus", "goby", "yamz"]


@pytest.mark.spark
def test_main_job_streams_demo_publishers_into_parquet(tmp_path):
    env = dict(os.environ, SPARK_ZMQ_LOG_LEVEL="WARNING")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_zmq.jobs.zeroeq_to_parquet",
            "--events",
            "40",
            "--output",
            str(tmp_path / "events"),
            "--seconds",
            "120",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"wrote 120 rows to {tmp_path / 'events'}" in result.stdout
    assert "demo::Temperature" in result.stdout and "demo::Heartbeat" in result.stdout


def test_every_auto_registered_module_imports():
    """Spark's lookup imports every pyspark_* module in one process: one that fails to import
    hides every format, not just its own."""
    import importlib
    import pkgutil

    names = sorted(
        m.name for m in pkgutil.iter_modules([str(ROOT)]) if m.name.startswith("pyspark_")
    )
    found = {importlib.import_module(name).DefaultSource.name() for name in names}
    assert found == set(FORMATS)
