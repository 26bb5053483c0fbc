"""The one Prometheus model, on the real /metrics captures of vLLM 0.11.0 and 0.32.0 (tiny model, after golden traffic):
what the conformance cases, the surface diff, the load cross-check and the live block checks read from it."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import DataError
from harness.load.runner import SCRAPE_PREFIXES
from harness.metrics import (
    MAX_EXPOSITION_CHARS,
    MAX_LINE_CHARS,
    Exposition,
    keep_series,
    parse_exposition,
    parse_metrics,
)

DATA = Path(__file__).parent.parent / "golden" / "data"
V011 = (DATA / "metrics-vllm-0.11.0.txt").read_text()
V032 = (DATA / "metrics-vllm-0.32.0.txt").read_text()


def stored(text: str) -> str:
    """A scrape as the load runner keeps it in events.jsonl (engine lines only, no HELP)."""
    return keep_series(text, SCRAPE_PREFIXES)


@pytest.fixture(scope="module", params=["0.11.0", "0.32.0"])
def expo(request) -> Exposition:
    return parse_exposition(V011 if request.param == "0.11.0" else V032)


def test_families_and_types_of_a_real_capture(expo):
    assert expo.family("vllm:kv_cache_usage_perc").type == "gauge"
    assert expo.family("vllm:num_preemptions").type == "counter"
    assert expo.family("vllm:num_preemptions_total") is expo.family("vllm:num_preemptions")  # the sample name finds it
    assert expo.family("vllm:time_to_first_token_seconds").type == "histogram"
    assert expo.family("vllm:cache_config_info").type == "gauge"
    assert expo.family("vllm:no_such_metric") is None
    # the text format's `_created` timestamps are families of their own in the model (the surface drops them)
    assert expo.family("vllm:num_preemptions_created").type == "gauge"


def test_kv_usage_gauge_and_scheduler_gauges(expo):
    assert expo.value("vllm:kv_cache_usage_perc") == 0.0
    assert expo.value("vllm:num_requests_running") == 0.0 and expo.value("vllm:num_requests_waiting") == 0.0
    busy = parse_exposition(
        V011.replace(
            'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0',
            'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25',
        )
    )
    assert busy.value("vllm:kv_cache_usage_perc") == 0.25


def test_prefix_cache_counters_and_preemptions():
    old, new = parse_exposition(V011), parse_exposition(V032)
    assert old.value("vllm:prefix_cache_queries_total") == 1465.0 and old.value("vllm:prefix_cache_hits_total") == 0.0
    assert new.value("vllm:prefix_cache_queries_total") == 5961.0
    assert new.value("vllm:prefix_cache_hits_total") == 2688.0
    assert old.value("vllm:num_preemptions_total") == new.value("vllm:num_preemptions_total") == 0.0
    assert old.value("vllm:generation_tokens_total") == 1404.0 and old.value("vllm:prompt_tokens_total") == 1465.0


def test_values_sum_over_label_sets_and_filter_by_labels():
    expo = parse_exposition(V011)
    assert expo.value("vllm:request_success_total") == 35.0  # stop 6 + length 29 + abort 0
    assert expo.value("vllm:request_success_total", finished_reason="length") == 29.0
    assert expo.value("vllm:request_success_total", finished_reason="nope") is None
    reasons = {s.labels["finished_reason"] for s in expo.samples("vllm:request_success_total")}
    assert reasons == {"stop", "length", "abort"}


def test_label_sets(expo):
    cc = expo.labels("vllm:cache_config_info")
    assert cc["block_size"] == "128" and cc["enable_prefix_caching"] == "True" and cc["engine"] == "0"
    assert expo.family("vllm:cache_config_info").samples[0].value == 1.0
    assert expo.family("vllm:kv_cache_usage_perc").label_names() == {"engine", "model_name"}
    # a histogram's `le` is a bucket bound, not a series label
    assert expo.family("vllm:time_to_first_token_seconds").label_names() == {"engine", "model_name"}
    assert expo.labels("vllm:no_such_metric") == {}


def test_cache_config_of_each_version():
    old = parse_exposition(V011).labels("vllm:cache_config_info")
    new = parse_exposition(V032).labels("vllm:cache_config_info")
    assert old["num_gpu_blocks"] == "8192" and old["cpu_kvcache_space_bytes"] == "1073741824"
    assert old["num_gpu_blocks_override"] == "None"
    assert "cpu_kvcache_space_bytes" not in new and "kv_cache_size_tokens" in new


def test_histogram_buckets_of_a_real_capture():
    h = parse_exposition(V011).histogram("vllm:time_to_first_token_seconds")
    assert h.le[:4] == (0.001, 0.005, 0.01, 0.02) and h.le[-1] == math.inf
    assert h.cum[:4] == (0.0, 0.0, 3.0, 11.0) and h.cum[-1] == 66.0
    assert list(h.le) == sorted(h.le) and all(a <= b for a, b in zip(h.cum, h.cum[1:]))  # cumulative
    assert h.count == 66.0 and h.sum == pytest.approx(49.524545669555664)
    g = parse_exposition(V011).histogram("vllm:request_generation_tokens")
    assert g.to_dict() == {
        "le": [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, math.inf],
        "cum": [0.0, 0.0, 8.0, 23.0, 25.0, 35.0, 35.0, 35.0, 35.0, 35.0, 35.0],
        "count": 35.0,
        "sum": 486.0,
    }
    assert parse_exposition(V032).histogram("vllm:time_to_first_token_seconds").count == 22.0
    assert parse_exposition(V011).histogram("vllm:kv_cache_usage_perc") is None


def test_histogram_buckets_sum_over_label_sets():
    text = (
        '# TYPE h histogram\nh_bucket{a="1",le="1"} 1\nh_bucket{a="1",le="+Inf"} 2\nh_bucket{a="2",le="1"} 3\n'
        'h_bucket{a="2",le="+Inf"} 4\nh_count{a="1"} 2\nh_count{a="2"} 4\nh_sum{a="1"} 0.5\nh_sum{a="2"} 1.5\n'
    )
    h = parse_exposition(text).histogram("h")
    assert (h.le, h.cum, h.count, h.sum) == ((1.0, math.inf), (4.0, 6.0), 6.0, 2.0)


@pytest.mark.parametrize("text", [V011, V032], ids=["0.11.0", "0.32.0"])
def test_the_stored_form_of_a_scrape_reads_the_same(text):
    """events.jsonl keeps engine lines only; every value the cross-check reads is unchanged by that."""
    full, kept = parse_exposition(text), parse_exposition(stored(text))
    for name in full.sample_names():
        if name.startswith(("vllm:", "tgi_")):
            assert kept.value(name) == full.value(name), name
    for name in ("vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds"):
        assert kept.histogram(name) == full.histogram(name)
    assert kept.family("vllm:time_to_first_token_seconds").type == "histogram"


def test_a_counter_written_without_total_is_found_by_either_name():
    """TGI's exporter writes `tgi_request_count 5` under `# TYPE tgi_request_count counter`; the parser renames it."""
    expo = parse_exposition(
        "# TYPE tgi_request_count counter\ntgi_request_count 5\n"
        '# TYPE tgi_request_failure counter\ntgi_request_failure{err="x"} 1\n'
    )
    assert expo.family("tgi_request_count").type == "counter"
    assert expo.value("tgi_request_count") == expo.value("tgi_request_count_total") == 5.0
    assert expo.labels("tgi_request_failure") == {"err": "x"}


def test_samples_of_one_name_without_a_type_line_are_one_family():
    """Without `# TYPE` the parser yields one family per line; the model keeps every line, as a reader would."""
    expo = parse_exposition('m_total{r="a"} 1\nm_total{r="b"} 2\nx_bucket{le="1"} 1\nx_bucket{le="+Inf"} 3\n')
    assert expo.value("m_total") == 3.0 and len(expo.family("m_total").samples) == 2
    assert expo.family("m_total").label_names() == {"r"}
    assert expo.histogram("x").cum == (1.0, 3.0)


def test_label_values_are_unescaped_and_names_may_be_any_label():
    expo = parse_exposition('m{name="a\\"b",self="1"} 1\n')
    assert expo.labels("m") == {"name": 'a"b', "self": "1"}
    assert expo.value("m", name='a"b', self="1") == 1.0  # label names never clash with the method's own arguments


def test_an_empty_exposition_is_empty_not_an_error():
    expo = parse_exposition("")
    assert expo.families == {} and expo.value("vllm:kv_cache_usage_perc") is None and expo.labels("x") == {}


# ---------------------------------------------------------------- hostile input: one DataError, bounded


@pytest.mark.parametrize("text, needle", [
    ('vllm:x{a="1" 2\n', "not Prometheus text"),
    ("vllm:x one\n", "not Prometheus text"),
    ("# TYPE vllm:x\n", "not Prometheus text"),
    ("# TYPE 9bad gauge\n", "not Prometheus text"),
    ('vllm:x{a="1",a="2"} 1\n', "not Prometheus text"),
    ('h_bucket{le="high"} 1\n', "le='high'"),
    ("\x00\x01SSH-2.0-not-http\r\n", "not Prometheus text"),
])  # fmt: skip
def test_text_that_is_not_the_format_is_one_data_error(text, needle):
    with pytest.raises(DataError, match=needle) as e:
        parse_exposition(text, where="/metrics of x")
    assert str(e.value).startswith("/metrics of x: ") and "\n" not in str(e.value)


def test_a_huge_exposition_is_refused_before_parsing():
    t = time.monotonic()
    with pytest.raises(DataError, match="characters"):
        parse_exposition("m 1\n" * (MAX_EXPOSITION_CHARS // 4 + 1))
    assert time.monotonic() - t < 2.0


@pytest.mark.parametrize("line", [
    "#" + " " * MAX_LINE_CHARS + "TYPE m gauge",  # the parser re-slices a comment per space: quadratic
    "m{" + ",".join(f'a{i}="1"' for i in range(MAX_LINE_CHARS // 6)) + "} 1",
])  # fmt: skip
def test_an_overlong_line_is_refused_before_parsing(line):
    t = time.monotonic()
    with pytest.raises(DataError, match="line is over"):
        parse_exposition(("m 1\n" + line + "\n") * 64)
    assert time.monotonic() - t < 2.0


def test_the_longest_allowed_lines_parse_in_bounded_time():
    line = "#" + " " * (MAX_LINE_CHARS - 20) + "TYPE m gauge"
    t = time.monotonic()
    parse_exposition((line + "\n") * 64)
    assert time.monotonic() - t < 5.0


def test_non_text_is_a_data_error():
    with pytest.raises(DataError):
        parse_exposition(b"m 1\n")  # type: ignore[arg-type]


LINES = V011.splitlines() + V032.splitlines()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_an_exposition_or_one_data_error(text):
    try:
        parse_exposition(text)
    except DataError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=30), st.integers(0, 10_000), st.text(max_size=8))
def test_real_lines_cut_and_spliced_are_an_exposition_or_one_data_error(lines, cut, junk):
    text = "\n".join(lines)
    cut %= len(text) + 1
    try:
        expo = parse_exposition(text[:cut] + junk + text[cut:])
    except DataError:
        return
    for fam in expo.families.values():  # every reader's question has an answer
        fam.label_names()
        expo.value(fam.name)
        expo.histogram(fam.name)


# ---------------------------------------------------------------- Scrape: what a conformance case reads


def test_a_scrape_that_parses():
    s = parse_metrics(V011)
    assert s.ok and s.error is None and s.text == V011 and s.t_ns > 0
    assert s.family("vllm:generation_tokens").type == "counter" and s.value("vllm:generation_tokens_total") == 1404.0
    assert "vllm:generation_tokens_total" in s.sample_names() and "vllm:generation_tokens" in s.families


def test_a_scrape_that_does_not_parse_is_a_result_not_an_exception():
    s = parse_metrics('vllm:x{a="1" 2\n')
    assert not s.ok and s.error.startswith("unparseable metrics text: ") and s.families == {}
    assert s.value("vllm:x") is None and s.family("vllm:x") is None


@pytest.mark.parametrize("text", [V011, V032], ids=["0.11.0", "0.32.0"])
def test_the_timeline_reads_the_same_gauges_from_its_cut(text):
    """The load timeline parses only its three gauges per scrape (a whole scrape costs ~50x more): same values."""
    import re

    from harness.engines import profile_for
    from harness.load.crosscheck import _exposition

    gauges = profile_for("vllm").metrics.timeline()
    text = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+", r"\1 3.0", text, flags=re.M)
    text = re.sub(r"^(vllm:kv_cache_usage_perc\{[^}]*\}) \S+", r"\1 0.25", text, flags=re.M)
    scrape = {"text": stored(text)}
    full, cut = _exposition(scrape), _exposition(scrape, gauges)
    assert [cut.value(n) for n in gauges] == [full.value(n) for n in gauges] == [0.25, 3.0, 0.0]
