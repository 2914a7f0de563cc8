"""Scraping a capture's metrics and probing its health as Prometheus and a supervisor do."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples at ``url``/metrics, parsed by prometheus_client: {(name, labels): value},
    the labels sorted by name."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def probe(url: str, path: str) -> tuple[int, str]:
    """(HTTP status, text) of a probe at ``url``+``path``."""
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()
