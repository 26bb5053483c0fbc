"""The block model's live cross-check reads the engine profile's series; on an engine whose profile has no block
configuration or KV usage gauge (llama.cpp, TGI) `harness blocks crosscheck` says why in one line and exits 2,
before any socket."""

from __future__ import annotations

import dataclasses
import io
import json
import socket
from contextlib import redirect_stderr, redirect_stdout

import httpx
import pytest

from harness.blocks import live
from harness.cli import main
from harness.engines import profile_for
from tests.support.models import TINY_CONFIG

METRICS = """# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",cpu_kvcache_space_bytes="1073741824",enable_prefix_caching="True",engine="0",num_gpu_blocks="8192",num_gpu_blocks_override="None"} 1.0
"""


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def no_sockets(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("kind", ["llamacpp", "tgi"])
def test_cli_says_in_one_line_why_the_checks_do_not_apply(kind, tmp_path, no_sockets):
    profile = profile_for(kind)
    missing = tmp_path / "no-such-model"  # not read: nothing is compared
    code, out, err = cli("blocks", "crosscheck", "--url", "http://127.0.0.1:1", "--model", str(missing),
                         "--engine", kind)  # fmt: skip
    assert code == 2 and out == ""
    assert err == f"harness: blocks crosscheck does not apply to {profile.title}: {profile.notes['blocks']}\n"


def test_cli_refuses_a_remote_url_first(no_sockets, tmp_path):
    code, _, err = cli("blocks", "crosscheck", "--url", "http://10.0.0.1:8000", "--model", str(tmp_path),
                       "--engine", "llamacpp")  # fmt: skip
    assert code == 2 and "loopback" in err and len(err.strip().splitlines()) == 1


def test_the_help_documents_the_exit_status():
    code, text, _ = cli("blocks", "crosscheck", "--help")
    assert code == 0 and "--engine" in text
    assert "2 bad input, or the checks do not apply to --engine" in " ".join(text.split())


def test_crosscheck_returns_a_verdict_per_check_saying_why(no_sockets, tmp_path):
    verdicts = live.crosscheck("http://127.0.0.1:1", tmp_path / "absent", engine="llamacpp")
    assert [v.check for v in verdicts] == list(live.CHECKS)
    why = f"does not apply to llama.cpp: {profile_for('llamacpp').notes['blocks']}"
    assert all(v.agree is None and v.explanation == why for v in verdicts)
    assert live.does_not_apply("llamacpp") == why and live.does_not_apply("vllm") is None


def test_a_check_whose_series_the_profile_lacks_does_not_apply_while_the_others_run(tmp_path):
    vllm = profile_for("vllm")
    partial = dataclasses.replace(vllm, metrics=dataclasses.replace(vllm.metrics, preemptions=None), notes={})
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    assert live.does_not_apply(partial) is None
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text=METRICS))) as c:
        v = live.check_preemptions(c, "http://127.0.0.1:1", engine=partial)
        assert (
            v.agree is None and v.explanation == "does not apply to vLLM: the vLLM profile names no preemptions series"
        )
        v = live.check_num_blocks(c, "http://127.0.0.1:1", tmp_path, dtype="float32", engine=partial)
        assert v.agree is True and v.measured == 8192


def test_the_checks_read_the_profile_names_not_vllm_literals(tmp_path):
    """A profile naming other series: the checks read those (here vLLM's series under another prefix)."""
    vllm = profile_for("vllm")
    renamed = dataclasses.replace(
        vllm,
        metrics=dataclasses.replace(vllm.metrics, prefix="other:", cache_config="other:cache_config_info"),
    )
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    text = METRICS.replace("vllm:", "other:")
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text=text))) as c:
        assert live.check_num_blocks(c, "http://127.0.0.1:1", tmp_path, dtype="float32", engine=renamed).agree is True
        v = live.check_num_blocks(c, "http://127.0.0.1:1", tmp_path, dtype="float32")  # the vLLM names: absent
        assert v.agree is None and "vllm:cache_config_info" in v.explanation
