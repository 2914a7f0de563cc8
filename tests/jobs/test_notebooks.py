"""The notebooks a newcomer starts from: each runs top to bottom in a Jupyter kernel of this
interpreter, shows the data its demo peers sent (a table and a plot) and cleans up after itself.

A notebook that passes is saved, executed, in ``build/notebooks/`` (git-ignored): the docs site
renders those copies with their outputs (scripts/docs_hooks.py), so the site shows what this
run checked, never outputs committed long ago."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import sys
from base64 import b64decode
from pathlib import Path

import pytest

from support.common import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "spark-zmq-tests"
CELL_TIMEOUT = 180
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: where the executed notebooks go for the docs site, and the metadata key naming their source
EXECUTED = ROOT / "build" / "notebooks"
SOURCE_KEY = "spark_zmq_docs"

#: per notebook: what its outputs must hold (table rows as ``|a|b|``, with the padding of
#: DataFrame.show() removed) and how many messages its demo sends and its query must receive
EXPECTED = {
    "zeroeq_quickstart": {
        "messages": 150,
        "rows": [
            r"\|127\.0\.0\.1:(?P<a>\d+)\|tcp://127\.0\.0\.1:(?P=a)\|demo::Counter\|100\|",
            r"\|127\.0\.0\.1:(?P<b>\d+)\|tcp://127\.0\.0\.1:(?P=b)\|demo::Counter\|50\|",
            r"\|127\.0\.0\.1:\d+\|0\|[-0-9: .]+\|demo::Counter\|0\|",
        ],
    },
    "ebus_quickstart": {
        "messages": 170,
        "rows": [
            r"\|sensors/@127\.0\.0\.1:\d+\|sensors/temperature\|100\|",
            r"\|sensors/@127\.0\.0\.1:\d+\|sensors/pressure\|50\|",
            r"\|alarms/@127\.0\.0\.1:\d+\|alarms/door\|20\|",
            r"\|alarms/@127\.0\.0\.1:\d+\|0\|[-0-9: .]+\|alarms/door\|"
            r'\{"open": true, "tick": 0\}\|',
            r"\|alarms/@127\.0\.0\.1:\d+\|1\|[-0-9: .]+\|alarms/door\|"
            r'\{"open": false, "tick": 5\}\|',
            r"\|sensors/@127\.0\.0\.1:\d+\|\d\|[-0-9: .]+\|sensors/temperature\|"
            r'\{"celsius": 20\.0\}\|',
            r"\|sensors/@127\.0\.0\.1:\d+\|\d\|[-0-9: .]+\|sensors/pressure\|"
            r'\{"hPa": 1000\}\|',
        ],
    },
    "goby_quickstart": {
        "messages": 170,
        "rows": [
            r"\|/nav/@/\S+/goby\.manager\|nav\|JSON\|nlohmann::json\|100\|",
            r"\|/nav/@/\S+/goby\.manager\|nav\|CSTR\|CSTR\|50\|",
            r"\|/log/@/\S+/goby\.manager\|log\|CSTR\|CSTR\|20\|",
            r"\|/log/@/\S+/goby\.manager\|0\|[-0-9: .]+\|log\|CSTR\|tick 0\|",
            r"\|/log/@/\S+/goby\.manager\|1\|[-0-9: .]+\|log\|CSTR\|tick 5\|",
            r'\|/nav/@/\S+/goby\.manager\|\d\|[-0-9: .]+\|nav\|JSON\|\{"depth": 5\.0\}\|',
            r"\|/nav/@/\S+/goby\.manager\|\d\|[-0-9: .]+\|nav\|CSTR\|heading 0\|",
        ],
    },
    "yamz_quickstart": {
        "messages": 150,
        "rows": [
            r"\|daq41\|tps\|\{apa -> 41, det -> tpc\}\|tcp://127\.0\.0\.1:\d+\|100\|",
            r"\|daq42\|tps\|\{apa -> 42, det -> tpc\}\|tcp://127\.0\.0\.1:\d+\|50\|",
            r"\|daq41\|1\|[-0-9: .]+\|apa 41 trigger primitive 1\|",
            r"\|daq42\|1\|[-0-9: .]+\|apa 42 trigger primitive 2\|",
        ],
        "absent": ["|daq43|", "apa 43 trigger"],  # the port that the address does not match
    },
}

#: run after the notebook's own cells: what its clean-up cell left running
PROBE = """
import json as _json, os as _os, threading as _threading
from pyspark import SparkContext as _SparkContext
print('PROBE ' + _json.dumps({
    'spark_running': _SparkContext._active_spark_context is not None,
    'work_left': _os.path.exists(work),
    'threads': sorted(t.name for t in _threading.enumerate() if t.name.startswith('spark_zmq')),
}))
"""


def test_every_notebook_is_tested():
    assert {path.stem for path in NOTEBOOKS} == set(EXPECTED)


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A kernelspec running this interpreter (the one with spark_zmq installed), found first."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "spark_zmq tests",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend shows plots
    return KERNEL


def run_notebook(path: Path, kernel_name: str, cwd: Path):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    notebook.cells.append(nbformat.v4.new_code_cell(PROBE))
    NotebookClient(
        notebook,
        kernel_name=kernel_name,
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(cwd)}},
    ).execute()
    return notebook


def save_for_the_docs(source: Path, notebook) -> Path:
    """Writes the executed notebook, without the probe cell, where the docs build finds it,
    with the digest of the source it was made from (a copy of an older source is not used)."""
    import nbformat

    notebook = nbformat.from_dict(json.loads(json.dumps(notebook)))
    notebook.cells = notebook.cells[:-1]
    notebook.metadata[SOURCE_KEY] = {
        "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest()
    }
    EXECUTED.mkdir(parents=True, exist_ok=True)
    target = EXECUTED / source.name
    partial = target.with_suffix(f".{os.getpid()}.partial")
    nbformat.write(notebook, partial)
    partial.replace(target)
    return target


def texts(cell) -> list[str]:
    """What a code cell printed or showed as text (stderr, where Spark logs, left out)."""
    found = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream" and output.name == "stdout":
            found.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            found.append(output.data.get("text/plain", ""))
    return found


def pngs(cell) -> list[bytes]:
    return [
        b64decode(output.data["image/png"])
        for output in cell.get("outputs", [])
        if output.output_type == "display_data" and "image/png" in output.data
    ]


@pytest.mark.spark
@pytest.mark.jvms
@pytest.mark.timeout(360)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs_and_shows_what_its_demo_sent(path, kernel, tmp_path):
    expected = EXPECTED[path.stem]
    notebook = run_notebook(path, kernel, tmp_path)
    *cells, probe = notebook.cells
    code = [cell for cell in cells if cell.cell_type == "code"]
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# ")
    assert all(cell.execution_count for cell in code)

    shown = "\n".join(text for cell in code for text in texts(cell))
    tables = re.sub(r" *\| *", "|", shown)
    for row in expected["rows"]:
        assert re.search(row, tables), f"{row!r} not in the output of {path.name}:\n{shown}"
    for absent in expected.get("absent", ()):
        assert absent not in tables, f"{absent!r} in the output of {path.name}:\n{shown}"
    counts = re.findall(r"sent (\d+) messages, the query has (\d+) rows", shown)
    assert counts == [(str(expected["messages"]),) * 2], shown

    images = [image for cell in code for image in pngs(cell)]
    assert len(images) == 1, f"{path.name} shows {len(images)} images, not its one plot"
    assert images[0].startswith(PNG_SIGNATURE)
    width, height = struct.unpack(">II", images[0][16:24])  # the IHDR chunk
    assert width >= 400 and height >= 150 and len(images[0]) > 10_000

    report = [
        line for text in texts(probe) for line in text.splitlines() if line.startswith("PROBE ")
    ]
    assert len(report) == 1, texts(probe)
    assert json.loads(report[0][len("PROBE ") :]) == {
        "spark_running": False,
        "work_left": False,
        "threads": [],
    }
    saved = save_for_the_docs(path, notebook)
    assert len(json.loads(saved.read_text())["cells"]) == len(cells)
