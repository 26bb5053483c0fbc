"""One /metrics scrape as a check sees it: whether it answered and parsed, and the exposition if it did.

s = parse_metrics(text)            # Scrape(ok, exposition, error, text, t_ns, status); never raises
s.family("engine:generation_tokens").type, s.value("engine:generation_tokens_total")
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from harness.errors import DataError
from harness.metrics.model import Exposition, Family, parse_exposition

__all__ = ["Scrape", "parse_metrics"]


@dataclass
class Scrape:
    ok: bool
    exposition: Exposition = field(default_factory=Exposition)
    error: str | None = None
    text: str = ""
    t_ns: int = 0
    status: int | None = None

    @property
    def families(self) -> dict[str, Family]:
        return self.exposition.families

    def family(self, name: str) -> Family | None:
        return self.exposition.family(name)

    def value(self, name: str, /, **labels: str) -> float | None:
        return self.exposition.value(name, **labels)

    def sample_names(self) -> set[str]:
        return self.exposition.sample_names()


def parse_metrics(text: str) -> Scrape:
    """A scrape of `text`; text that is not the format is a Scrape with ok=False and the reason (a check's verdict)."""
    t_ns = time.monotonic_ns()
    try:
        return Scrape(ok=True, exposition=parse_exposition(text), text=text, t_ns=t_ns)
    except DataError as exc:
        return Scrape(ok=False, error=f"unparseable metrics text: {exc}", text=text, t_ns=t_ns)
