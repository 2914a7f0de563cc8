"""``spark-zmq doctor``: the host's checks, each problem found where it is and named with its fix.
The executors' side (the job ``doctor`` under spark-submit) is tested in tests/test_deploy.py."""

from __future__ import annotations

import os
import subprocess
import sys

from support.common import ROOT

DOCTOR = [sys.executable, "-m", "spark_zmq", "doctor"]


def doctor(*args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()):
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    return subprocess.run(
        [*prefix, *DOCTOR, *args],
        env=dict(base, **(env or {})),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,  # a checkout: the Python under test must not import the package from here
    )


def test_a_formats_python_without_the_package_is_a_problem_with_its_fix():
    bare = sys._base_executable  # the interpreter this venv was made from: no spark_zmq
    done = doctor(env={"PYSPARK_PYTHON": bare})
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"PROBLEM  formats' Python: PYSPARK_PYTHON={bare}" in done.stdout
    assert "cannot import spark_zmq" in done.stdout and "DATA_SOURCE_NOT_FOUND" in done.stdout
    assert f"fix: export PYSPARK_PYTHON={sys.executable}" in done.stdout


def test_a_host_that_gives_the_formats_what_they_need_has_no_problem(tmp_path):
    done = doctor("--spool", str(tmp_path / "spool"), env={"PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ok       formats' Python: PYSPARK_PYTHON={sys.executable}" in done.stdout
    assert "ok       mDNS route: 224.0.0.251 is reached from 127.0.0.1" in done.stdout
    assert "ok       multicast interfaces: lo" in done.stdout  # the tests' namespace
    assert "ok       extra yamz: zeromq-pyre" in done.stdout
    assert "ok       compiled core: receive and send, calling " in done.stdout
    assert done.stdout.rstrip().splitlines()[-2] == "0 problems found"


def test_no_multicast_route_and_an_unwritable_spool_are_problems(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    # a namespace of its own whose lo is up without multicast and with no route to 224.0.0.0/4
    inner = 'ip link set lo up && exec "$@"'
    done = doctor(
        "--spool",
        str(blocker / "spool"),
        env={"PYSPARK_PYTHON": sys.executable},
        prefix=("unshare", "--net", "sh", "-c", inner, "doctor"),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "PROBLEM  mDNS route: no route to 224.0.0.251" in done.stdout
    assert "fix: a multicast route (ip route add 224.0.0.0/4 dev IFACE)" in done.stdout
    assert "PROBLEM  multicast interfaces: no interface is up and multicast-capable" in done.stdout
    assert f"PROBLEM  spool: {blocker / 'spool'} cannot be written" in done.stdout
