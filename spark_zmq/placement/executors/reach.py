"""Which capture process may capture an endpoint (``capture=executors``).

Discovery runs on the driver's host, and may find an endpoint that only that host reaches: a
publisher bound to loopback (``127.0.0.0/8``, ``::1``, ``localhost``), a link-local address
(``169.254.0.0/16``, ``fe80::/10``: one link, one host's view of it), an unspecified one
(``0.0.0.0``, ``::``, which Linux connects to the host itself), an ``ipc://`` path (a
file of that host; gobyd's Router often is one) or an ``inproc://`` name (one process). A
process on another host that connects there reaches its own host, or nothing, and hears
nothing, with no error. So such an endpoint is *host-local*, and only a capture process on the
driver's host may capture it (``may_capture``): one on an executor of that host, or else the one
the driver starts there.

A host is told apart by its name and its network namespace (``spool.processes.host_identity``):
another machine has another name, and a container or emulated host on the same machine has a
network namespace (and so a loopback) of its own.
"""

from __future__ import annotations

import ipaddress

from spark_zmq.spool.processes import EXECUTOR, ProcessRecord

#: host names that mean this host (RFC 6761: localhost and every name under it)
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def host_local(address: str) -> bool:
    """Whether only the host that found ``address`` (a zmq endpoint) can connect to it."""
    scheme, _, rest = address.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    if scheme != "tcp":
        return False
    host = rest.rpartition(":")[0].strip("[]").split("%")[0].lower()
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # a host name: another host resolves it too
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified  # 0.0.0.0: this host


def may_capture(process: ProcessRecord, address: str, driver_host: str | None) -> bool:
    """Whether ``process`` may capture the endpoint at ``address``: a host-local one only on
    the driver's host (``driver_host``, None: not known, so nowhere), any other only in a
    process that an executor started (the driver's own captures host-local endpoints only)."""
    if host_local(address):
        return driver_host is not None and process.host == driver_host
    return process.role == EXECUTOR
