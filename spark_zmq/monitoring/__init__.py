"""What operators watch: a process that captures serves Prometheus metrics and health probes on
one HTTP port.

- ``metrics``: the metrics, read at each scrape from what capture and its spool already keep
  (nothing is counted per message on capture's path), with a bounded number of series;
- ``health``: the probes' answers, and whether a spool takes a write;
- ``server``: the HTTP server: ``/metrics``, ``/healthz`` (liveness), ``/readyz`` (readiness).
"""
