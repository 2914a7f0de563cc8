"""The HTTP server of a process that captures: ``/metrics`` (Prometheus' text format, by
``prometheus_client``), ``/healthz`` (liveness: 200 while capture runs) and ``/readyz``
(readiness: 200 while it runs and can write its spool), each answer a line of text that says
why."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

from spark_zmq.log import logger
from spark_zmq.monitoring.health import Health
from spark_zmq.monitoring.metrics import CaptureCollector, CaptureView
from spark_zmq.protocols.addresses import bracketed


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    """On an IPv6 address (``WSGIServer`` binds IPv4 only)."""

    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes come every few seconds: no line each."""


class MonitoringServer:
    """Serves ``registry`` and the two probes on ``address``:``port`` (0: any free port) from a
    thread of its own, from ``start`` to ``close``."""

    def __init__(
        self,
        address: str,
        port: int,
        registry: CollectorRegistry,
        live: Callable[[], Health],
        ready: Callable[[], Health],
    ) -> None:
        self._address = address
        self._metrics = make_wsgi_app(registry)
        self._probes = {"/healthz": live, "/readyz": ready}
        self._server = make_server(
            address,
            port,
            self._app,
            server_class=_Server6 if ":" in address else _Server,
            handler_class=_QuietHandler,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="spark_zmq monitoring", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        """The address it listens on, with the port it got."""
        return self._address, self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{bracketed(self._address)}:{self._server.server_port}"

    def start(self) -> None:
        self._thread.start()
        logger.info("metrics at %s/metrics, probes at %s/healthz and /readyz", self.url, self.url)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _app(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        probe = self._probes.get(path)
        if probe is None:
            if path == "/metrics":
                return self._metrics(environ, start_response)
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: /metrics, /healthz and /readyz are served here\n"]
        try:
            health = probe()
        except Exception as exc:  # a probe that cannot tell is a failed probe
            health = Health(False, f"the probe failed: {exc}")
        status = "200 OK" if health.ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [f"{'ok' if health.ok else 'not ok'}: {health.why}\n".encode()]


def capture_server(
    format_name: str,
    where: tuple[str, int],
    view: Callable[[], CaptureView],
    live: Callable[[], Health],
    ready: Callable[[], Health],
) -> MonitoringServer:
    """The server of one capture's metrics (``CaptureCollector`` of ``view``, and the
    process's own) and probes on ``where`` (address, port); OSError if it cannot bind there."""
    registry = CollectorRegistry()
    registry.register(CaptureCollector(format_name, view))
    ProcessCollector(registry=registry)  # the process_* series: CPU, memory, open files
    return MonitoringServer(*where, registry, live, ready)
