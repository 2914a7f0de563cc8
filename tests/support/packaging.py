"""The package's wheel, built offline from a copy of the checkout (an in-tree build would leave
build/ behind), for the packaging and deployment tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from support.common import ROOT

PYSPARK_MODULES = [f"pyspark_{name}.py" for name in ("zeroeq", "ebus", "goby", "yamz")]
#: caches, and the editable install's in-place build of the capture core: the wheel compiles its own
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "native.c")
#: wheels of the run-time dependencies with the zeroeq extra (scripts/setup.sh downloads them)
WHEELHOUSE = ROOT / ".venv" / "wheelhouse"


def build_wheel(folder: Path) -> Path:
    """spark_zmq's wheel, built in ``folder``."""
    source = folder / "source"
    shutil.copytree(ROOT / "spark_zmq", source / "spark_zmq", ignore=IGNORED)
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE", *PYSPARK_MODULES):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "-w", str(folder), str(source)], check=True, capture_output=True, timeout=300
    )
    (wheel,) = folder.glob("spark_zmq-*.whl")
    return wheel
