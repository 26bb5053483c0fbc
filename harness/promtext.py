"""Prometheus text scrape + parse (prometheus_client.parser). Parsing never raises; problems are returned.

    scrape = await fetch_metrics(client)                 # Scrape(ok, families, error, text)
    scrape.family("vllm:generation_tokens").type       # 'counter' (the parser strips _total from counter families)
    scrape.value("vllm:generation_tokens_total")        # sum over all label sets of that *sample* name
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Family", "Scrape", "parse_metrics", "fetch_metrics"]


@dataclass
class Family:
    name: str
    type: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def label_names(self) -> set[str]:
        out: set[str] = set()
        for _, labels, _ in self.samples:
            out |= set(labels) - {"le", "quantile"}
        return out


@dataclass
class Scrape:
    ok: bool
    families: dict[str, Family] = field(default_factory=dict)
    error: str | None = None
    text: str = ""
    t_ns: int = 0
    status: int | None = None

    def family(self, name: str) -> Family | None:
        f = self.families.get(name)
        if f is None and name.endswith("_total"):
            f = self.families.get(name[: -len("_total")])
        return f

    def value(self, sample_name: str, **labels: str) -> float | None:
        # prometheus_client's parser reports counter samples with a `_total` suffix even when the text had none
        # (TGI's exporter writes `tgi_request_count 5`), so accept both spellings.
        names = {sample_name, sample_name + "_total"}
        total, seen = 0.0, False
        for fam in self.families.values():
            for name, lab, v in fam.samples:
                if name in names and all(lab.get(k) == val for k, val in labels.items()):
                    total += v
                    seen = True
        return total if seen else None

    def sample_names(self) -> set[str]:
        return {n for f in self.families.values() for n, _, _ in f.samples}


def parse_metrics(text: str) -> Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    s = Scrape(ok=True, text=text, t_ns=time.monotonic_ns())
    try:
        for fam in text_string_to_metric_families(text):
            f = Family(fam.name, fam.type)
            for smp in fam.samples:
                f.samples.append((smp.name, dict(smp.labels), float(smp.value)))
            s.families[fam.name] = f
    except Exception as exc:  # the parser raises ValueError and friends on bad text
        s.ok, s.error = False, f"unparseable metrics text: {type(exc).__name__}: {str(exc)[:200]}"
    return s


async def fetch_metrics(client: Any, path: str = "/metrics") -> Scrape:
    """GET /metrics with an httpx.AsyncClient; transport errors become Scrape(ok=False)."""
    import httpx

    try:
        r = await client.get(path)
    except httpx.HTTPError as exc:
        return Scrape(ok=False, error=f"{type(exc).__name__}: {exc}", t_ns=time.monotonic_ns())
    if r.status_code != 200:
        return Scrape(ok=False, error=f"HTTP {r.status_code}", text=r.text[:500], status=r.status_code, t_ns=time.monotonic_ns())
    s = parse_metrics(r.text)
    s.status = r.status_code
    return s
