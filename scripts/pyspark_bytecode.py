"""Adds compiled bytecode to the zips that Spark puts first on its Python processes' path.

Spark starts its Python processes (the streaming source's runner, the workers' daemon, a
spark-submit job's driver) with ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip ahead of
site-packages, and Python cannot cache bytecode inside a zip: each process compiles the pyspark
modules it imports again. That is about 0.9 CPU-seconds before a streaming source's runner
connects back to the JVM, which gives it 10 s (hard-coded in ``PythonWorkerFactory``); on the
test suite's loaded 2-core machine a runner missed that deadline and its query failed.

This writes each zip again with a checked-hash ``.pyc`` beside every module (tests excepted).
zipimport prefers the ``.pyc``, checks it against the source's hash, and compiles the source as
before when the hash or the interpreter's magic number differs, so the modules and their
behaviour are the same; only the start is faster (about half the CPU here). A zip that already
has them is left alone.

Usage: python scripts/pyspark_bytecode.py  (the zips of the pyspark this Python imports)
"""

from __future__ import annotations

import os
import py_compile
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

#: modules not compiled: pyspark's own test suites, which no Spark process imports
SKIPPED_PARTS = ("/tests/", "/testing/")


def zips() -> list[Path]:
    """The zips of ``python/lib`` in the installed pyspark (its SPARK_HOME)."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    return sorted(lib.glob("*.zip"))


def compiled(archive: Path) -> bool:
    """Whether ``archive`` already has bytecode beside its modules."""
    with zipfile.ZipFile(archive) as zin:
        return any(name.endswith(".pyc") for name in zin.namelist())


def bytecode(source: bytes, shown_as: str, scratch: Path) -> bytes:
    """A checked-hash .pyc of ``source``, whose tracebacks name ``shown_as``."""
    module = scratch / "module.py"
    module.write_bytes(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        written = py_compile.compile(
            str(module),
            cfile=str(scratch / "module.pyc"),
            dfile=shown_as,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
    return Path(written).read_bytes()


def add_bytecode(archive: Path) -> int:
    """Write ``archive`` again with a .pyc beside each module; how many were added. The new
    zip replaces the old one by a rename, so a process starting meanwhile reads either."""
    added = 0
    fd, temporary = tempfile.mkstemp(dir=archive.parent, suffix=".zip")
    os.close(fd)
    try:
        with (
            zipfile.ZipFile(archive) as zin,
            zipfile.ZipFile(temporary, "w") as zout,
            tempfile.TemporaryDirectory() as scratch,
        ):
            for info in zin.infolist():
                data = zin.read(info)
                zout.writestr(info, data)
                name = info.filename
                if not name.endswith(".py") or any(part in f"/{name}" for part in SKIPPED_PARTS):
                    continue
                pyc = zipfile.ZipInfo(name + "c", info.date_time)
                pyc.compress_type = zipfile.ZIP_DEFLATED
                zout.writestr(pyc, bytecode(data, f"{archive}/{name}", Path(scratch)))
                added += 1
        os.chmod(temporary, archive.stat().st_mode)
        os.replace(temporary, archive)
    except BaseException:
        os.unlink(temporary)
        raise
    return added


def main() -> int:
    for archive in zips():
        if compiled(archive):
            continue
        print(f"pyspark_bytecode: {add_bytecode(archive)} modules compiled into {archive.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
