"""``spark-zmq doctor``: what this host gives the formats, each problem with its fix.

- the package, and each extra's libraries (``spark_zmq.extras``);
- the compiled modules (``spark_zmq.native``): a note where they do not load, since capture and
  writers then run their Python paths, correct but with several times the CPU per message;
- the Python that Spark will start for the formats' processes: ``PYSPARK_DRIVER_PYTHON``, else
  ``PYSPARK_PYTHON``, else ``python3`` from the ``PATH`` (the conf ``spark.pyspark.python`` is
  not read for auto-registered Python data sources; docs/deploying.md), and whether it has the
  package: without it, ``format("zeroeq")`` fails with ``DATA_SOURCE_NOT_FOUND``;
- a route to the mDNS group, which ZeroEQ discovery browses (checked by a UDP connect, which
  looks the route up and sends nothing), and the interfaces that are up and multicast-capable;
- with ``--spool``, that the spool folder can be written.

The job ``doctor`` (``spark-submit "$(spark-zmq job doctor)"``) runs these checks in the
driver of a real application and adds the executors' side.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib
import importlib.metadata
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from spark_zmq import __version__
from spark_zmq.extras import EXTRAS, importable, missing

#: the mDNS group and port that ZeroEQ's ZeroConf discovery browses
MDNS_GROUP = ("224.0.0.251", 5353)
IFF_UP, IFF_MULTICAST, SIOCGIFFLAGS = 0x1, 0x1000, 0x8913  # <linux/if.h>, <linux/sockios.h>
DEPLOYING = "docs/deploying.md"
OK, NOTE, PROBLEM = "ok", "note", "PROBLEM"
#: the variables that name the Python of auto-registered Python data sources, first wins
FORMATS_PYTHON = ("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON")


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``status`` ok, note (worth knowing, not a fault) or PROBLEM; what
    was found and, unless ok, what to do."""

    check: str
    status: str
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.status != PROBLEM


def report(findings: list[Finding]) -> str:
    """One line per finding (and its fix), then a summary line."""
    lines = []
    for finding in findings:
        lines.append(f"{finding.status:8} {finding.check}: {finding.detail}")
        if finding.fix:
            lines.append(f"{'':8} fix: {finding.fix}")
    problems = sum(not f.ok for f in findings)
    lines.append(f"{problems} problem{'s' if problems != 1 else ''} found")
    return "\n".join(lines) + "\n"


def local_findings(
    spool: str | None = None, environment: Mapping[str, str] | None = None
) -> list[Finding]:
    """This host's checks; ``environment``: the one Spark's JVM runs with, where it is not this
    process's (a driver under spark-submit gets a PYSPARK_PYTHON of its own)."""
    findings = [
        Finding(
            "package",
            OK,
            f"spark_zmq {__version__} in {sys.executable} (Python {sys.version.split()[0]})",
        )
    ]
    findings += extras_findings()
    findings.append(compiled_core())
    findings.append(data_source_python(os.environ if environment is None else environment))
    findings += multicast_findings()
    if spool is not None:
        findings.append(spool_writable(spool))
    return findings


def extras_findings() -> list[Finding]:
    findings = []
    for extra, modules in EXTRAS.items():
        problems = missing(extra)
        if problems and extra == "spark" and importable("pyspark"):
            findings.append(Finding("extra spark", PROBLEM, str(problems[0])))
            continue
        if problems:
            absent = [f"{name} (import {module})" for module, name in sorted(modules.items())]
            where = (
                "unless spark-submit puts a Spark installation's pyspark on the path"
                if extra == "spark"
                else f"where you use format('{extra}')"
            )
            findings.append(
                Finding(
                    f"extra {extra}",
                    NOTE,
                    f"not usable here: needs {', '.join(absent)}",
                    f"pip install 'spark_zmq[{extra}]' {where}",
                )
            )
            continue
        versions = ", ".join(
            f"{name} {version_of(name, module)}" for module, name in sorted(modules.items())
        )
        findings.append(Finding(f"extra {extra}", OK, versions))
    return findings


def compiled_core() -> Finding:
    from spark_zmq.native import RECEIVE, SEND, status

    found = status()
    if found.startswith("available"):
        return Finding(
            "compiled core", OK, f"receive and send, {found.removeprefix('available, ')}"
        )
    return Finding(
        "compiled core",
        NOTE,
        f"the compiled modules are {found}; capture and writers run their Python paths",
        f"reinstall spark_zmq where a C compiler and Python's headers are (pip install "
        f"--force-reinstall --no-binary spark_zmq spark_zmq), or set {RECEIVE.variable}=python "
        f"and {SEND.variable}=python to choose the Python paths",
    )


def version_of(distribution: str, module: str) -> str:
    """A library's version: from its installed metadata, else from the module (a Spark
    runtime's pyspark comes on PYTHONPATH, without metadata)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        version = getattr(importlib.import_module(module), "__version__", None)
        return f"{version or 'of unknown version'} (not installed: on the path)"


def data_source_python(environment: Mapping[str, str]) -> Finding:
    """Whether the Python Spark will start for the formats has the package."""
    for variable in FORMATS_PYTHON:
        if environment.get(variable):
            spec, source = environment[variable], variable
            break
    else:
        spec, source = "python3", "neither PYSPARK_DRIVER_PYTHON nor PYSPARK_PYTHON is set, so"
    path = spec if os.sep in spec else shutil.which(spec)
    check = "formats' Python"
    fix = (
        f"export PYSPARK_PYTHON={sys.executable} (a Python with spark_zmq) before Spark starts; "
        f"on a cluster, one path that resolves on every host ({DEPLOYING})"
    )
    said = f"{source}={spec}" if source.startswith("PYSPARK") else f"{source} {spec}"
    if path is None or not os.path.exists(path):
        return Finding(check, PROBLEM, f"{said}: not found from {os.getcwd()}", fix)
    probe = subprocess.run(  # from a neutral folder: -c would import a checkout's package
        [os.path.abspath(path), "-c", "import spark_zmq; print(spark_zmq.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tempfile.gettempdir(),
    )
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["it failed"])[-1]
        return Finding(
            check,
            PROBLEM,
            f"{said}: Spark starts {path} for format(...), which cannot import spark_zmq "
            f"({why}): queries fail with DATA_SOURCE_NOT_FOUND",
            fix,
        )
    return Finding(check, OK, f"{said}: {path} has spark_zmq {probe.stdout.strip()}")


def multicast_findings() -> list[Finding]:
    findings = []
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(MDNS_GROUP)  # a route lookup; a UDP connect sends nothing
        via = probe.getsockname()[0]
        findings.append(Finding("mDNS route", OK, f"{MDNS_GROUP[0]} is reached from {via}"))
    except OSError as exc:
        findings.append(
            Finding(
                "mDNS route",
                PROBLEM,
                f"no route to {MDNS_GROUP[0]} ({exc.strerror}): ZeroEQ discovery cannot browse",
                "a multicast route (ip route add 224.0.0.0/4 dev IFACE), or name the "
                "publishers in the option `publishers`",
            )
        )
    finally:
        probe.close()
    interfaces = multicast_interfaces()
    if interfaces:
        findings.append(Finding("multicast interfaces", OK, ", ".join(interfaces)))
    else:
        findings.append(
            Finding(
                "multicast interfaces",
                PROBLEM,
                "no interface is up and multicast-capable: ZeroConf and Zyre find nothing",
                "bring up an interface with multicast (ip link set IFACE multicast on)",
            )
        )
    return findings


def multicast_interfaces() -> list[str]:
    """Interfaces of this network namespace that are up and multicast-capable (asked of the
    kernel with SIOCGIFFLAGS: /sys may show another namespace's)."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("16sH", name.encode()[:15], 0)
            try:
                flags = struct.unpack("16sH", fcntl.ioctl(probe, SIOCGIFFLAGS, request)[:18])[1]
            except OSError:
                continue
            if flags & IFF_UP and flags & IFF_MULTICAST:
                found.append(name)
    return found


def spool_writable(spool: str) -> Finding:
    folder = Path(spool)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Finding(
            "spool",
            PROBLEM,
            f"{folder} cannot be written ({exc.strerror})",
            "a spoolPath this user can write (with capture=executors: one every node reaches)",
        )
    return Finding("spool", OK, f"{folder} can be written")


def add_doctor_parser(commands: argparse._SubParsersAction) -> None:
    doctor = commands.add_parser(
        "doctor", help="check what this host gives the formats; each problem with its fix"
    )
    doctor.add_argument("--spool", help="also check that this spool folder can be written")


def run_doctor(args: argparse.Namespace) -> int:
    findings = local_findings(args.spool)
    sys.stdout.write(report(findings))
    print('for the executors\' side, submit the job: spark-submit "$(spark-zmq job doctor)"')
    return 0 if all(f.ok for f in findings) else 1
