"""The short soak run (about a minute): faults of every kind, then nothing duplicated and nothing
lost after capture. The full run is ``python benchmarks/soak.py`` (10 minutes)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from support.common import ROOT

pytestmark = pytest.mark.spark


def test_short_soak_loses_nothing_after_capture_and_duplicates_nothing():
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--short"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = run.stdout
    figures = {
        name: int(value.replace(",", ""))
        for name, value in re.findall(r"^  (\S.*?)\s{2,}([\d,]+)$", out, re.M)
    }
    assert run.returncode == 0, out + run.stderr[-3000:]
    assert figures["duplicated"] == 0 and figures["lost after capture"] == 0, out
    assert figures["delivered"] > 0.25 * figures["sent"], out
    faults = dict(
        re.findall(
            r"(publisher|broker|query|capture) (\d+)",
            re.search(r"faults injected\s+(.*)", out).group(1),
        )
    )
    assert all(int(faults[kind]) >= 1 for kind in ("publisher", "broker", "query", "capture"))
