"""Hostile input for the shared readers, the loopback rule, the output guards and env redaction (issue 12: #1, #2,
#3, #13-host, #14-duplicates, #19, #22, #23, #24, #27, #29-umask). Table-driven plus hypothesis; no socket opens."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import DataError, HarnessError, ManifestError, OutputError, RefusedError, UsageError
from harness.net import is_loopback_host, loopback_url, redact_url
from harness.outputs import atomic_write_text, output_dir, output_file
from harness.readers import iter_jsonl, parse_json, parse_yaml, read_json, read_yaml
from harness.secrets import redact_env
from tests.support import netguard


@pytest.mark.parametrize(
    "url, error",
    [("http://8.8.8.8:80", RefusedError), ("http://10.0.0.1:8000", RefusedError), ("http://example.com", RefusedError),
     ("http://127.0.0.1.nip.io:80", RefusedError), ("http://0.0.0.0:80", RefusedError), ("http://[::]:80", RefusedError),
     ("ftp://127.0.0.1:21", UsageError), ("http://127.0.0.1:99999", UsageError), ("http://127.0.0.1:1\n", UsageError),
     ("http://127.0.0.1:0", UsageError), ("127.0.0.1:8000", UsageError), ("", UsageError), ("http://", UsageError)],
)  # fmt: skip
def test_loopback_rule_refuses_on_the_parsed_address(url, error):
    before = list(netguard.ATTEMPTS)
    with pytest.raises(error):
        loopback_url(url)
    assert netguard.ATTEMPTS == before  # decided without a socket


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "http://127.0.0.2:1/", "http://[::1]:9", "http://localhost:5"]
)
def test_loopback_rule_accepts_loopback(url):
    assert loopback_url(url) == url.rstrip("/") or loopback_url(url).startswith("http://")


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_loopback_rule_never_returns_a_remote_url(text):
    import httpx

    try:
        out = loopback_url(text)
    except (UsageError, RefusedError):
        return
    assert is_loopback_host(httpx.URL(out).host)


def test_redact_url_hides_userinfo_everywhere():
    assert redact_url("http://user:secret@127.0.0.1:8/v1") == "http://***@127.0.0.1:8/v1"
    assert "secret" not in redact_url("http://user:secret@[bad")
    assert redact_url("http://127.0.0.1:8") == "http://127.0.0.1:8"
    assert "secret" not in str(pytest.raises(UsageError, loopback_url, "ftp://u:secret@127.0.0.1").value)


def test_redact_env_keeps_names_hides_unknown_values():
    shown = redact_env({"HF_TOKEN": "hf_abc", "VLLM_CPU_KVCACHE_SPACE": "1", "MY_VAR": "x"})
    assert shown["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert shown["HF_TOKEN"].startswith("sha256:") and "hf_abc" not in str(shown)
    assert shown["MY_VAR"] != "x" and set(shown) == {"HF_TOKEN", "VLLM_CPU_KVCACHE_SPACE", "MY_VAR"}


DEEP = "[" * 20000


@pytest.mark.parametrize("reader, error", [(read_json, DataError), (read_yaml, ManifestError)])
def test_deep_nesting_is_one_error(tmp_path, reader, error):
    p = tmp_path / "deep"
    p.write_text(DEEP)
    with pytest.raises(error, match="nested"):
        reader(p, "thing")
    p.write_text("[" * 100 + "]" * 100)
    with pytest.raises(error, match="nested"):
        reader(p, "thing")


def test_jsonl_names_the_line(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text('{"a": 1}\n{"t": NaN}\n')
    with pytest.raises(DataError, match="line 2"):
        list(iter_jsonl(p, "events"))
    p.write_text('{"a": 1}\n' + DEEP + "\n")
    with pytest.raises(DataError, match="line 2"):
        list(iter_jsonl(p, "events"))


def test_yaml_duplicate_key_names_both_lines(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("engine:\n  kind: vllm\nengine:\n  kind: tgi\n")
    with pytest.raises(ManifestError, match=r"line 3.*duplicate key 'engine'.*line 1"):
        read_yaml(p, "manifest")


def test_yaml_non_finite_number_names_the_field(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("arrival:\n  rate: .nan\n")
    with pytest.raises(ManifestError, match=r"arrival\.rate"):
        read_yaml(p, "scenario")


def test_fifo_and_device_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in (fifo, "/dev/zero"):
        with pytest.raises(DataError, match="not a regular file"):
            read_json(p, "meta")


def test_unreadable_file_is_one_error(tmp_path, monkeypatch):
    p = tmp_path / "x.json"
    p.write_text("{}")
    real_open = os.open

    def denied(path, flags, *a, **k):  # root reads every file, so permission is refused by the patch
        if str(path) == str(p):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(DataError, match="cannot read.*Permission denied"):
        read_json(p, "meta")


def test_directory_and_non_utf8_are_one_error(tmp_path):
    with pytest.raises(ManifestError, match="is a directory"):
        read_yaml(tmp_path, "manifest")
    p = tmp_path / "b.yaml"
    p.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(ManifestError, match="line 2.*not UTF-8"):
        read_yaml(p, "manifest")


def test_bom_is_not_content(tmp_path):
    p = tmp_path / "b.json"
    p.write_bytes(b"\xef\xbb\xbf[1]")
    assert read_json(p, "x") == [1]


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_any_bytes_give_a_value_or_one_harness_error(data):
    text = data.decode("utf-8", errors="replace")
    for parse in (lambda: parse_json(text, "f", "x"), lambda: parse_yaml(text, "f", "x")):
        try:
            parse()
        except HarnessError as exc:
            assert "\n" not in exc.one_line()


def test_output_guards(tmp_path):
    existing = tmp_path / "r.json"
    existing.write_text("{}")
    with pytest.raises(OutputError, match="already exists"):
        output_file(existing)
    with pytest.raises(OutputError, match="input"):
        output_file(existing, force=True, inputs=[existing])
    with pytest.raises(OutputError, match="is a directory"):
        output_file(tmp_path)
    with pytest.raises(OutputError, match="not a directory"):
        output_dir(existing, ["a"])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.json").write_text("{}")
    with pytest.raises(OutputError, match="already holds a.json"):
        output_dir(tmp_path / "out", ["a.json", "b.json"])
    assert output_dir(tmp_path / "out", ["a.json"], force=True) == tmp_path / "out"


def test_atomic_write_follows_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644
    with pytest.raises(OutputError):
        atomic_write_text(tmp_path, "x")


def test_yaml_integer_past_the_digit_limit_is_one_error(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("port: " + "1" * 5000 + "\n")
    with pytest.raises(ManifestError, match="digit"):
        read_yaml(p, "manifest")
