"""One model of a Prometheus text exposition, read by prometheus_client's parser (the only parser of the format here).

    expo = parse_exposition(text)                         # DataError for text that is not the format, or too big
    expo.family("engine:generation_tokens").type          # 'counter' (the parser strips _total from counter families)
    expo.value("engine:generation_tokens_total")          # sum over every label set of that *sample* name
    expo.labels("engine:cache_config_info")               # the labels of its first sample (an info gauge's data)
    expo.histogram("engine:time_to_first_token_seconds")  # Histogram(le, cum, count, sum), summed over label sets

(The names an engine exports are its profile's: harness.engines, `profile.metrics`.)

Families of one name are one family even when the text splits them (samples without a `# TYPE` line arrive as one
family per line): the model is every sample in text order, grouped by family name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from harness.errors import DataError

__all__ = [
    "MAX_EXPOSITION_CHARS",
    "MAX_LINE_CHARS",
    "Exposition",
    "Family",
    "Histogram",
    "Sample",
    "parse_exposition",
    "keep_series",
]

MAX_EXPOSITION_CHARS = 16 << 20  # one engine's /metrics is tens of KB; every caller bounds its own read below this
# The parser's work on one line grows with the square of its length (it re-slices the line per token), so a line is
# bounded too; the longest line of a real engine scrape (an info gauge's labels) is about 1 KB.
MAX_LINE_CHARS = 16 << 10
# What prometheus_client's parser raises on text that is not the format (ValueError mostly; the others on odd shapes).
_PARSER_ERRORS = (ValueError, TypeError, IndexError, KeyError, AttributeError)


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    samples: tuple[Sample, ...] = ()

    def label_names(self) -> set[str]:
        """Label names of its series (a histogram's `le` and a summary's `quantile` are not series labels)."""
        out: set[str] = set()
        for s in self.samples:
            out |= set(s.labels) - {"le", "quantile"}
        return out


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets summed over label sets, by upper bound (`+Inf` is math.inf)."""

    le: tuple[float, ...]
    cum: tuple[float, ...]
    count: float
    sum: float

    def to_dict(self) -> dict[str, Any]:
        return {"le": list(self.le), "cum": list(self.cum), "count": self.count, "sum": self.sum}


@dataclass(frozen=True)
class Exposition:
    families: dict[str, Family] = field(default_factory=dict)

    def family(self, name: str) -> Family | None:
        """A family by the name a client registers, or by a counter's `_total` sample name."""
        f = self.families.get(name)
        if f is None and name.endswith("_total"):
            f = self.families.get(name[: -len("_total")])
        return f

    def samples(self, name: str, /, **labels: str) -> list[Sample]:
        """Every sample of that name whose labels include `labels`, in text order.

        The parser names a counter's samples `<name>_total` even when the text wrote `<name>` (some exporters write a
        counter as `request_count 5`), so the name as written finds them as well."""
        names = {name, name + "_total"}
        return [
            s
            for f in self.families.values()
            for s in f.samples
            if s.name in names and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, /, **labels: str) -> float | None:
        """The sum over every matching series (one engine, one model: a single series); None when there is none."""
        found = self.samples(name, **labels)
        return sum(s.value for s in found) if found else None

    def labels(self, name: str) -> dict[str, str]:
        """The labels of the first sample of that name ({} when there is none): the data of an `*_info` gauge."""
        found = self.samples(name)
        return dict(found[0].labels) if found else {}

    def sample_names(self) -> set[str]:
        return {s.name for f in self.families.values() for s in f.samples}

    def histogram(self, name: str) -> Histogram | None:
        """The `<name>_bucket` samples summed over label sets by upper bound, with `<name>_count` and `<name>_sum`."""
        buckets: dict[float, float] = {}
        for s in self.samples(name + "_bucket"):
            if "le" in s.labels:
                le = float(s.labels["le"])  # checked at parse time
                buckets[le] = buckets.get(le, 0.0) + s.value
        if not buckets:
            return None
        les = sorted(buckets)
        return Histogram(
            tuple(les),
            tuple(buckets[x] for x in les),
            self.value(name + "_count") or 0.0,
            self.value(name + "_sum") or 0.0,
        )


def _check_size(text: str, where: str) -> None:
    if len(text) > MAX_EXPOSITION_CHARS:
        raise DataError(f"{where}: not Prometheus text exposition: over {MAX_EXPOSITION_CHARS} characters")
    # split on "\n" alone, as the parser does (str.splitlines would also split on characters the parser keeps)
    if text and max(map(len, text.split("\n"))) > MAX_LINE_CHARS:
        raise DataError(f"{where}: not Prometheus text exposition: a line is over {MAX_LINE_CHARS} characters")


def _bound(s: Sample) -> None:
    """A bucket's upper bound must be a number: Histogram reads it as one."""
    if s.name.endswith("_bucket") and "le" in s.labels:
        try:
            float(s.labels["le"])
        except ValueError:
            raise ValueError(f"{s.name}: bucket bound le={s.labels['le']!r} is not a number") from None


def parse_exposition(text: str, where: str = "/metrics") -> Exposition:
    """The whole exposition, or one DataError naming `where` (never the parser's own exception)."""
    if not isinstance(text, str):
        raise DataError(f"{where}: not Prometheus text exposition: {type(text).__name__}, not text")
    _check_size(text, where)
    grouped: dict[str, tuple[str, list[Sample]]] = {}
    try:
        for fam in text_string_to_metric_families(text):
            _, samples = grouped.setdefault(fam.name, (fam.type, []))  # the first `# TYPE` of a name decides
            for s in fam.samples:
                sample = Sample(s.name, dict(s.labels), float(s.value))
                _bound(sample)
                samples.append(sample)
    except _PARSER_ERRORS as exc:
        detail = f"{type(exc).__name__}: {str(exc)[:200]}" if str(exc) else type(exc).__name__
        raise DataError(f"{where}: not Prometheus text exposition: {detail}") from None
    return Exposition({name: Family(name, typ, tuple(samples)) for name, (typ, samples) in grouped.items()})


def keep_series(text: str, prefixes: tuple[str, ...]) -> str:
    """The exposition cut to the sample and `# TYPE` lines of series named with one of `prefixes` (what a load run
    stores per scrape: the engine's own series, not the process collector's). A cut, not a parse: the stored text is
    parsed later, by `parse_exposition`, like any other."""
    wanted = prefixes + tuple(f"# TYPE {p}" for p in prefixes)
    return "\n".join(line for line in text.splitlines() if line.startswith(wanted))
