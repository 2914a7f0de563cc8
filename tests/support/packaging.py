"""The package's wheel as CI checks it (scripts/check_wheel.sh: built offline from a copy of the
checkout, installed in a fresh venv, the capture self-test run there), for the packaging and
deployment tests: built once per session (the ``checked_wheel`` fixture), since each build
compiles the capture core."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from support.common import ROOT

#: wheels of the run-time dependencies with the zeroeq extra (scripts/setup.sh downloads them)
WHEELHOUSE = ROOT / ".venv" / "wheelhouse"


@dataclass(frozen=True)
class CheckedWheel:
    """What one run of scripts/check_wheel.sh left in ``folder``, and its output."""

    folder: Path
    run: subprocess.CompletedProcess

    @property
    def output(self) -> str:
        return self.run.stdout + self.run.stderr

    @property
    def wheel(self) -> Path:
        """The wheel it built (the check may have failed after the build)."""
        found = sorted((self.folder / "wheels").glob("spark_zmq-*.whl"))
        assert len(found) == 1, f"scripts/check_wheel.sh built no wheel:\n{self.output[-3000:]}"
        return found[0]


def check_wheel(folder: Path) -> CheckedWheel:
    run = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_wheel.sh"), str(folder)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    return CheckedWheel(folder, run)
