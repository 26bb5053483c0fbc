"""Prometheus metrics: one model of a text exposition (`model.py`, on prometheus_client's parser), a scrape as checks
see it (`scrape.py`), and the metric surface of an engine with the diff between two (`surface.py`)."""

from harness.metrics.model import (
    MAX_EXPOSITION_CHARS,
    MAX_LINE_CHARS,
    Exposition,
    Family,
    Histogram,
    Sample,
    keep_series,
    parse_exposition,
)
from harness.metrics.scrape import Scrape, parse_metrics

__all__ = [
    "keep_series",
    "MAX_EXPOSITION_CHARS",
    "MAX_LINE_CHARS",
    "Exposition",
    "Family",
    "Histogram",
    "Sample",
    "Scrape",
    "parse_exposition",
    "parse_metrics",
]
