"""Parsers of the generic reader's option values that say more than a number or a word:
offset specs, retention durations, spool folders, the spool server's address, nice values."""

from __future__ import annotations

import json
import re
from urllib.parse import urlparse

from spark_zmq.errors import SparkZmqError
from spark_zmq.options import duration, positive_int
from spark_zmq.protocols.addresses import check_host, check_port
from spark_zmq.spool.remote import ServerSettings

# ---------------------------------------------------------------------------------------------
# startingOffsets and endingOffsets (spark_zmq.spark.offsets.resolve applies them to a spool)

#: earliest, latest, or an offset per partition
OffsetSpec = str | dict[str, int]
#: in a JSON offset spec, as in Kafka's: the first offset still held, and the next one written
EARLIEST, LATEST = -2, -1


def starting_offsets(value: str) -> OffsetSpec:
    """Option parser: ``earliest``, ``latest`` or JSON ``{"<partition>": offset}``."""
    return _offset_spec(value, ("earliest", "latest"))


def ending_offsets(value: str) -> OffsetSpec:
    """Option parser: ``latest`` or JSON ``{"<partition>": offset}`` (no ``earliest``: a
    read that ends where it starts reads nothing)."""
    return _offset_spec(value, ("latest",))


def _offset_spec(value: str, words: tuple[str, ...]) -> OffsetSpec:
    if value.strip().lower() in words:
        return value.strip().lower()
    if not value.strip().startswith("{"):
        raise ValueError(value)
    doc = json.loads(value)  # ValueError: the option's error says what is accepted
    if not isinstance(doc, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= EARLIEST for v in doc.values()
    ):
        raise ValueError(value)
    return {str(k): int(v) for k, v in doc.items()}


def retention_duration(value: str) -> float | None:
    """Option parser: a duration (``duration``), or ``forever`` (None: no bound by age)."""
    if value.strip().lower() == "forever":
        return None
    return duration(value)


def reader_name(value: str) -> str:
    """Option parser: a reader's name (``spoolReader``): 1 to 200 characters, spaces around
    it left out."""
    name = value.strip()
    if not 0 < len(name) <= 200:
        raise ValueError(value)
    return name


# ---------------------------------------------------------------------------------------------
# spoolPath: a folder on a POSIX file system

#: a URI's scheme, as an object store's paths begin (``s3a://``, ``abfss://``, ``dbfs:/``)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/")


class NotAPosixFolder(SparkZmqError, ValueError):
    """A spoolPath on storage the spool cannot live on (an object store, HDFS, DBFS)."""


def spool_folder(value: str) -> str:
    """Option parser: a folder path; a ``file:`` URI is taken as its path. Any other URI is
    refused: the spool needs what a POSIX file system gives (``flock`` for one writer,
    ``rename`` that replaces a file whole, ``mkdir`` that one claimant wins), which object
    stores do not; taken as a path, ``s3a://b/x`` would quietly become the local ``s3a:/b/x``."""
    match = _SCHEME.match(value.strip())
    if match is None:
        return value
    scheme = match.group(1).lower()
    if scheme == "file":
        return urlparse(value.strip()).path
    hint = " (on Databricks, the FUSE path /dbfs/... is a local path)" if scheme == "dbfs" else ""
    raise NotAPosixFolder(
        f"{scheme}:// is not a POSIX file system: the spool needs flock, atomic rename and "
        f"mkdir; give a local folder or an NFS mount{hint}"
    )


def milliseconds_or_auto(value: str) -> int | None:
    """``flushIntervalMs``: ``auto`` (None: capture chooses by its endpoints) or a positive
    number of milliseconds."""
    if value.strip().lower() == "auto":
        return None
    return positive_int(value)


def spool_server(value: str) -> ServerSettings | None:
    """``spoolServer``: ``auto`` (Spark's default driver address, any port), ``off`` (None),
    ``HOST`` or ``HOST:PORT`` (``[v6]:PORT`` for an IPv6 literal with a port)."""
    text = value.strip()
    if text.lower() == "off":
        return None
    if text.lower() == "auto":
        return ServerSettings()
    host, port = text, "0"
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(value)
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    return ServerSettings(check_host(host), 0 if port == "0" else check_port(port))


def metrics_address(value: str) -> tuple[str, int] | None:
    """``metrics``: ``off`` (None), ``PORT`` (on loopback) or ``HOST:PORT`` (``[v6]:PORT``);
    port 0: any free one."""
    text = value.strip()
    if text.lower() == "off":
        return None
    if text.isdigit():
        return "127.0.0.1", 0 if text == "0" else check_port(text)
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(value)
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return check_host(host), 0 if port == "0" else check_port(port)


def pem_file(value: str) -> str:
    """A PEM file (``spoolServerCertificate``, ``spoolServerKey``): its path, checked to exist
    and hold a PEM block (read again where the server starts)."""
    path = value.strip()
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError as exc:
        raise ValueError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    if "-----BEGIN " not in text:
        raise ValueError(f"{path!r} holds no PEM block (-----BEGIN ...)")
    return path


def capture_nice(value: str) -> int | None:
    """``captureNice``: a nice value (-20..19), or None for ``off``."""
    if value.strip().lower() == "off":
        return None
    number = int(value.strip())
    if not -20 <= number <= 19:
        raise ValueError("not a nice value")
    return number
