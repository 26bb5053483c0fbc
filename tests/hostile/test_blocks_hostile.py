"""Hostile input for `harness blocks capacity|waste|simulate|crosscheck` (issue 12: #1, #18, #22, #23, #28).

Every bad number, file or URL is one `harness: error:` line on stderr naming the flag, field or file, exit 2: never a
traceback, a negative capacity, a run without end or memory without bound. Table-driven plus hypothesis; the only
servers are on loopback. Cases that hung (or grew without bound) before the fix run in a subprocess with a timeout
and a memory cap, so on old code they fail instead of hanging the suite.
"""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness
from harness.blocks import live
from harness.blocks import scenario as sc_mod
from harness.cli import main
from harness.errors import RefusedError, UsageError
from tests.support import netguard
from tests.support.badserver import BadServer
from tests.support.models import TINY_CONFIG

TINY = TINY_CONFIG
GOOD_SCENARIO = {
    "requests": 4,
    "arrival": {"kind": "constant", "rate": 10},
    "prompt_tokens": {"kind": "fixed", "value": 20},
    "output_tokens": {"kind": "fixed", "value": 5},
    "engine": {"num_blocks": 64, "block_size": 16},
}
REPO = Path(harness.__file__).resolve().parent.parent


def cli(*argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one in-process run; argparse's SystemExit is an exit code too."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def cli_bounded(*argv: str, timeout: float = 30.0) -> tuple[int, str, str]:
    """The same in a subprocess with a wall-time limit and a 2 GiB address-space cap (for what used to hang)."""

    def cap_memory():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        p = subprocess.run([sys.executable, "-m", "harness", *argv], capture_output=True, text=True, timeout=timeout,
                           cwd=REPO, env=env, preexec_fn=cap_memory)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"harness {' '.join(argv)[:200]} did not finish in {timeout} s")
    return p.returncode, p.stdout, p.stderr


def assert_one_line_error(result: tuple[int, str, str], *needles: str) -> str:
    code, _, err = result
    assert "Traceback" not in err, err[-2000:]
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("harness: error: "), (code, err[-2000:])
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def config_file(tmp_path: Path, cfg: object, name: str = "config.json") -> str:
    p = tmp_path / name
    p.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return str(p)


def scenario_file(tmp_path: Path, doc: object, name: str = "s.yaml") -> str:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return str(p)


# ---------------------------------------------------------------- #18, #28, #23: capacity and its config.json


@pytest.mark.parametrize(
    "change, field",
    [({"num_hidden_layers": -2}, "num_hidden_layers"), ({"num_hidden_layers": 0}, "num_hidden_layers"),
     ({"head_dim": -64}, "head_dim"), ({"head_dim": 0}, "head_dim"), ({"num_key_value_heads": -1}, "num_key_value_heads"),
     ({"num_attention_heads": 0}, "num_attention_heads"), ({"num_attention_heads": -2}, "num_attention_heads"),
     ({"head_dim": None, "hidden_size": -128}, "hidden_size"), ({"head_dim": None, "hidden_size": 1}, "hidden_size"),
     ({"num_hidden_layers": 2.5}, "num_hidden_layers"), ({"num_hidden_layers": True}, "num_hidden_layers"),
     ({"num_hidden_layers": "2"}, "num_hidden_layers"), ({"num_hidden_layers": 10**30}, "num_hidden_layers"),
     ({"head_dim": 10**9}, "head_dim"), ({"num_hidden_layers": None}, "num_hidden_layers"),
     ({"torch_dtype": ["float32"]}, "torch_dtype")],
)  # fmt: skip
def test_capacity_refuses_a_bad_model_shape(tmp_path, change, field):
    cfg = {k: v for k, v in {**TINY, **change}.items() if v is not None}
    assert_one_line_error(cli("blocks", "capacity", "--model", config_file(tmp_path, cfg), "--kv-bytes", "1GiB",
                              "--block-size", "16"), field, "config.json")  # fmt: skip


@pytest.mark.parametrize(
    "text", ["[1, 2]", '"x"', "null", '{"text_config": [1]}', "{", "[" * 20000, '{"a": ' * 20000, "\ufeff{", "NaN"]
)
def test_capacity_unusable_or_deep_config_json_is_one_line(tmp_path, text):
    """#23: a config.json nested 20,000 deep (or not an object) is one line naming the file, not a RecursionError."""
    assert_one_line_error(cli("blocks", "capacity", "--model", config_file(tmp_path, text), "--kv-bytes", "1GiB",
                              "--block-size", "16"), "config.json")  # fmt: skip


def test_capacity_config_json_as_a_fifo_does_not_block(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    assert_one_line_error(cli_bounded("blocks", "capacity", "--model", str(tmp_path), "--kv-bytes", "1GiB",
                                      "--block-size", "16", timeout=20), "not a regular file")  # fmt: skip


@pytest.mark.parametrize(
    "flag, value",
    [("--block-size", "0"), ("--block-size", "-16"), ("--block-size", str(10**18)), ("--block-size", "16.5"),
     ("--block-size", "nan"), ("--tensor-parallel-size", "0"), ("--tensor-parallel-size", str(10**9)),
     ("--num-gpu-blocks-override", "0"), ("--num-gpu-blocks-override", str(10**18)), ("--max-model-len", "0"),
     ("--max-model-len", str(10**18)), ("--length", "-1"), ("--length", "1" * 5000), ("--kv-bytes", "-1GiB"),
     ("--kv-bytes", "9" * 30 + "GiB"), ("--kv-bytes", "1e999"), ("--kv-bytes", "nan"), ("--kv-bytes", str(2**51)),
     ("--kv-bytes", "2048TiB"), ("--kv-bytes", "1 PB"), ("--dtype", "int3"), ("--kv-cache-dtype", "x" * 10000)],
)  # fmt: skip
def test_capacity_absurd_flags_are_one_line_naming_the_flag(tmp_path, flag, value):
    argv = {"--model": config_file(tmp_path, TINY), "--kv-bytes": "1GiB", "--block-size": "16", flag: value}
    line = assert_one_line_error(cli("blocks", "capacity", *[x for kv in argv.items() for x in kv]))
    assert flag in line or flag.lstrip("-").replace("-", " ") in line or "dtype" in line, line
    assert len(line) < 400


def test_capacity_still_plans_in_range(tmp_path):
    code, out, _ = cli("blocks", "capacity", "--model", config_file(tmp_path, TINY), "--kv-bytes", "1.5GiB",
                       "--block-size", "128", "--dtype", "float32", "--length", "1024")  # fmt: skip
    assert code == 0 and json.loads(out)["num_blocks"] == 12288 and json.loads(out)["num_tokens"] > 0


# ---------------------------------------------------------------- #22, #28: waste


WASTE = ["--min", "200", "--max", "2000", "--block-size", "16"]


@pytest.mark.parametrize(
    "argv, flag",
    [(WASTE + ["--sample", "-5"], "--sample"), (WASTE + ["--sample", "1000000000000"], "--sample"),
     (["--min", "1", "--max", str(10**18), "--block-size", "16"], "--max"),
     (["--min", "1", "--max", "0", "--block-size", "16"], "--max"), (["--min", "-3", "--max", "9", "--block-size", "16"], "--min"),
     (["--min", "1", "--max", "9", "--block-size", "0"], "--block-size"), (WASTE + ["--seed", "-1"], "--seed"),
     (WASTE + ["--seed", "x"], "--seed"), (WASTE + ["--reserve", "0"], "--reserve"), (WASTE + ["--reserve", "5"], "reservation"),
     (["--min", "500", "--max", "400", "--block-size", "16"], "min"), (WASTE + ["--reserve", "2000"] * 17, "--reserve")],
)  # fmt: skip
def test_waste_absurd_numbers_are_one_line(argv, flag):
    assert_one_line_error(cli("blocks", "waste", *argv), flag)


def test_waste_huge_sample_and_range_are_refused_at_once():
    """#22: --sample 10**12 grew a list without bound; --max 10**18 built range(10**18). Both are refused up front."""
    for extra in (["--sample", "1000000000000"], ["--max", str(10**18)]):
        base = ["--min", "1", "--max", "100", "--block-size", "16"]
        assert_one_line_error(cli_bounded("blocks", "waste", *base, *extra, timeout=20), extra[0])


def test_waste_limits_are_usable():
    t0 = time.monotonic()
    code, out, _ = cli("blocks", "waste", "--min", "1", "--max", "100000", "--block-size",
                       "16", "--sample", "1000", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["sample_size"] == 1000 and time.monotonic() - t0 < 20


# ---------------------------------------------------------------- #22, #23, #28: simulate


@pytest.mark.parametrize(
    "text, field",
    [("arrival: {kind: constant, rate: .nan}", "arrival.rate"),
     ("arrival: {kind: constant, rate: 10}\nengine: {step_time_s: .nan}", "engine.step_time_s"),
     ("arrival: {kind: constant, rate: .inf}", "arrival.rate"), ("engine: {step_time_s: -.inf}", "engine.step_time_s")],
)  # fmt: skip
def test_simulate_nan_never_loops(tmp_path, text, field):
    """#22: `.nan` used to make the simulated clock never reach the next arrival: a loop without end."""
    body = yaml.safe_dump({k: v for k, v in GOOD_SCENARIO.items() if k not in ("arrival", "engine")})
    path = scenario_file(tmp_path, body + text + "\n")
    assert_one_line_error(cli_bounded("blocks", "simulate", path, timeout=20), field)


BAD_FIELDS = [
    ({"engine": {"num_blocks": 2.5}}, "engine.num_blocks"),
    ({"engine": {"num_blocks": 0}}, "engine.num_blocks"),
    ({"engine": {"num_blocks": 1}}, "engine.num_blocks"),
    ({"engine": {"num_blocks": 10**12}}, "engine.num_blocks"),
    ({"engine": {"block_size": 0}}, "engine.block_size"),
    ({"engine": {"block_size": 10**9}}, "engine.block_size"),
    ({"engine": {"step_time_s": 0}}, "engine.step_time_s"),
    ({"engine": {"step_time_s": -1}}, "engine.step_time_s"),
    ({"engine": {"step_time_s": 1e-300}}, "engine.step_time_s"),
    ({"engine": {"max_model_len": True}}, "max_model_len"),
    ({"engine": {"max_num_seqs": 0}}, "engine.max_num_seqs"),
    ({"engine": {"enable_prefix_caching": 1}}, "enable_prefix"),
    ({"engine": {"max_num_batched_tokens": 10**18}}, "max_num_batched_tokens"),
    ({"engine": {"nope": 1}}, "engine.nope"),
    ({"engine": [1]}, "engine"),
    ({"requests": "1e9"}, "requests"),
    ({"requests": 10**9}, "requests"),
    ({"requests": 0}, "requests"),
    ({"requests": 2.0}, "requests"),
    ({"requests": None}, "requests"),
    ({"arrival": {"kind": "constant", "rate": 0}}, "arrival.rate"),
    ({"arrival": {"kind": "poisson"}}, "arrival.kind"),
    ({"arrival": {"kind": "constant", "rate": 1e-300}}, "arrival.rate"),
    ({"arrival": {"rate": "fast"}}, "arrival.rate"),
    ({"prompt_tokens": {"kind": "fixed", "value": 2.5}}, "prompt_tokens"),
    ({"prompt_tokens": {"kind": "fixed", "value": 10**12}}, "prompt_tokens"),
    ({"prompt_tokens": {"kind": "uniform", "min": 5, "max": 1}}, "prompt_tokens"),
    ({"output_tokens": {"kind": "fixed", "value": -1}}, "output_tokens"),
    ({"seed": 1.5}, "seed"),
    ({"seed": 10**30}, "seed"),
    ({"shared_prefix": {"share": 2, "tokens": 4}}, "shared_prefix.share"),
    ({"shared_prefix": {"share": 0.5, "tokens": -4}}, "shared_prefix.tokens"),
    ({"requests": 100_000, "prompt_tokens": {"kind": "fixed", "value": 1_000_000}}, "limit"),
]


@pytest.mark.parametrize("change, field", BAD_FIELDS)
def test_simulate_absurd_fields_are_one_line_naming_the_field(tmp_path, change, field):
    """#28: `num_blocks: 2.5`, `requests: 1e9` and friends: one line naming the field, at once."""
    doc = {k: v for k, v in {**GOOD_SCENARIO, **change}.items() if v is not None}
    assert_one_line_error(cli_bounded("blocks", "simulate", scenario_file(tmp_path, doc), timeout=30), field, "s.yaml")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 20000,
        "a:\n  " + "- " * 5000 + "x",
        "{a: 1, a: 2}",
        yaml.safe_dump(GOOD_SCENARIO) + "requests: 9\n",
        "- 1\n- 2\n",
        "",
        "\x00\xff",
    ],
)
def test_simulate_hostile_yaml_is_one_line(tmp_path, text):
    """#23: deep nesting, duplicate keys, a non-mapping or binary scenario is one ManifestError naming the file."""
    assert_one_line_error(cli("blocks", "simulate", scenario_file(tmp_path, text)), "s.yaml")


def test_simulate_fifo_scenario_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "s.yaml")
    assert_one_line_error(cli_bounded("blocks", "simulate", str(tmp_path / "s.yaml"), timeout=20), "regular file")


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--num-blocks", "1"),
        ("--num-blocks", str(10**12)),
        ("--block-size", "0"),
        ("--max-num-seqs", "-1"),
        ("--max-num-batched-tokens", "1e3"),
    ],
)
def test_simulate_override_flags_are_bounded(tmp_path, flag, value):
    path = scenario_file(tmp_path, GOOD_SCENARIO)
    assert_one_line_error(cli_bounded("blocks", "simulate", path, flag, value, timeout=20), flag)


def test_simulate_request_that_can_never_finish_is_refused_not_spun(tmp_path):
    """A cache smaller than one request used to spin for a million steps and then print a partial result, exit 0."""
    doc = {
        **GOOD_SCENARIO,
        "prompt_tokens": {"kind": "fixed", "value": 100},
        "engine": {"num_blocks": 4, "block_size": 16, "max_num_batched_tokens": 32},
    }
    t0 = time.monotonic()
    assert_one_line_error(cli("blocks", "simulate", scenario_file(tmp_path, doc)), "req-0", "usable")
    assert time.monotonic() - t0 < 10


def test_simulation_is_bounded_in_steps_and_wall_time(tmp_path, monkeypatch):
    from harness.blocks import limits
    from harness.blocks.simulate import SimulationLimit, run

    sc = sc_mod.parse(
        {
            **GOOD_SCENARIO,
            "requests": 200,
            "arrival": {"kind": "constant"},
            "output_tokens": {"kind": "fixed", "value": 50},
            "engine": {"num_blocks": 1024, "max_num_seqs": 1},
        }
    )
    with pytest.raises(SimulationLimit, match="100 engine steps"):
        run(sc, max_steps=100)
    with pytest.raises(SimulationLimit, match="real time"):
        run(sc, max_wall_s=0.0)
    monkeypatch.setattr(limits, "MAX_STEPS", 50)  # the CLI uses the module's bounds
    doc = {
        **GOOD_SCENARIO,
        "requests": 200,
        "output_tokens": {"kind": "fixed", "value": 50},
        "engine": {"max_num_seqs": 1},
    }
    assert_one_line_error(cli("blocks", "simulate", scenario_file(tmp_path, doc)), "50 engine steps")


def test_good_scenarios_still_simulate(tmp_path):
    code, out, _ = cli("blocks", "simulate", scenario_file(tmp_path, GOOD_SCENARIO))
    assert code == 0 and json.loads(out)["finished"] == 4


def test_loadtest_scenario_too_large_for_the_simulator_is_refused_before_planning(tmp_path):
    """#22: 100,000 requests of 1,000,000 units were all built before the simulation started."""
    doc = {
        "name": "huge",
        "bounds": {"max_requests": 100_000, "max_duration_s": 10},
        "arrival": {"kind": "constant", "rate": 10},
        "prompt_tokens": {"kind": "fixed", "value": 1_000_000},
        "output_tokens": {"kind": "fixed", "value": 10},
        "prompt_unit": "char",
    }
    assert_one_line_error(cli_bounded("blocks", "simulate", scenario_file(tmp_path, doc), timeout=30), "limit")


# ---------------------------------------------------------------- #1: crosscheck's loopback rule


@pytest.mark.parametrize(
    "url, error",
    [("http://10.0.0.1:8000", RefusedError), ("http://8.8.8.8:80", RefusedError),
     ("http://localhost.example.com:80", RefusedError), ("http://127.0.0.1.nip.io:80", RefusedError),
     ("http://0.0.0.0:8000", RefusedError), ("http://127.0.0.1:99999", UsageError), ("ftp://127.0.0.1:21", UsageError),
     ("http://127.0.0.1:8000\n", UsageError), ("127.0.0.1:8000", UsageError)],
)  # fmt: skip
def test_crosscheck_applies_the_one_loopback_rule(tmp_path, url, error):
    before = list(netguard.ATTEMPTS)
    with pytest.raises(error):
        live.crosscheck(url, config_file(tmp_path, TINY))
    assert netguard.ATTEMPTS == before  # refused on the parsed address: no socket was needed
    assert_one_line_error(cli("blocks", "crosscheck", "--url", url, "--model", str(tmp_path)))


class _MetricsHandler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        body = METRICS.encode() if self.path.startswith("/metrics") else b"{}"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


METRICS = (
    'vllm:cache_config_info{block_size="128",cache_dtype="auto",cpu_kvcache_space_bytes="1073741824",'
    'enable_prefix_caching="True",engine="0",num_gpu_blocks="8192",num_gpu_blocks_override="None"} 1.0\n'
)


def test_crosscheck_accepts_all_of_127_0_0_0_slash_8(tmp_path):
    """#1: its own check refused 127.0.0.2 (loopback); the one rule accepts it, and the check runs against it."""
    server = ThreadingHTTPServer(("127.0.0.2", 0), _MetricsHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.2:{server.server_address[1]}"
        [v] = live.crosscheck(url, config_file(tmp_path, TINY), dtype="float32", checks=["num_blocks"])
        assert v.agree is True and v.measured == 8192
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("mode", ["garbage", "http500", "close", "endless", "drip", "hugeheaders"])
def test_crosscheck_against_a_bad_server_is_a_verdict_not_a_pass(tmp_path, monkeypatch, mode):
    """A server that answers nothing usable: 'could not run' verdicts, exit 1 (no observation is not a pass),
    bounded in time even when the answer never ends."""
    monkeypatch.setattr(live, "TIMEOUT_S", 2.0, raising=False)
    box: list = []
    with BadServer({"*": mode}) as s:
        t = threading.Thread(target=lambda: box.append(cli("blocks", "crosscheck", "--url", s.url, "--model",
                                                           config_file(tmp_path, TINY), "--check", "num_blocks")),
                             daemon=True)  # fmt: skip
        t.start()
        t.join(30)
        assert not t.is_alive(), f"crosscheck against a {mode} server did not finish in 30 s"
    code, out, err = box[0]
    assert code == 1 and "Traceback" not in err and "no check could be run" in err
    [v] = json.loads(out)
    assert v["agree"] is None and v["explanation"].startswith("could not run")


def test_crosscheck_bad_model_config_is_found_before_any_request(tmp_path):
    with BadServer("ok") as s:
        assert_one_line_error(cli("blocks", "crosscheck", "--url", s.url, "--model",
                                  config_file(tmp_path, "[" * 20000)), "config.json")  # fmt: skip
        assert sum(s.hits.values()) == 0


# ---------------------------------------------------------------- hypothesis: any number, any garbage

NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.integers(min_value=-5, max_value=5000).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", " ", "nan", "inf", "-inf", "1e9", "0x10", "1_000", "١٢", "--", "-", "9" * 5000, "1GiB"]),
    st.text(max_size=20),
)


def _check_result(result: tuple[int, str, str], elapsed: float) -> None:
    code, out, err = result
    assert elapsed < 15, f"took {elapsed:.1f} s"
    assert "Traceback" not in err
    if code == 0:
        assert out and not err.strip()
        body = json.loads(out)
        for key in ("num_blocks", "num_tokens", "usable_blocks", "page_size_bytes"):
            if key in body:
                assert body[key] >= 0, body  # #18: never a negative capacity
    else:
        assert_one_line_error(result)


@given(flag=st.sampled_from(["--block-size", "--tensor-parallel-size", "--num-gpu-blocks-override", "--max-model-len",
                             "--length", "--kv-bytes"]), value=NUMBERS)  # fmt: skip
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_capacity_any_number_is_a_result_or_one_line(tmp_path, flag, value):
    argv = {"--model": config_file(tmp_path, TINY), "--kv-bytes": "1GiB", "--block-size": "16", flag: value}
    t0 = time.monotonic()
    result = cli("blocks", "capacity", *[f"{k}={v}" for k, v in argv.items()])
    _check_result(result, time.monotonic() - t0)


@given(layers=st.one_of(st.integers(-(10**12), 10**12), st.floats(), st.text(max_size=5), st.none(), st.booleans()),
       head=st.one_of(st.integers(-(10**12), 10**12), st.floats(), st.none()))  # fmt: skip
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_capacity_any_config_number_is_a_result_or_one_line(tmp_path, layers, head):
    cfg = {**TINY, "num_hidden_layers": layers, "head_dim": head}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))  # NaN/Infinity are written as such: a reader must cope
    t0 = time.monotonic()
    _check_result(
        cli("blocks", "capacity", "--model", str(path), "--kv-bytes", "1GiB", "--block-size", "16"),
        time.monotonic() - t0,
    )


@given(flag=st.sampled_from(["--min", "--max", "--block-size", "--reserve", "--sample", "--seed"]), value=NUMBERS)
@settings(max_examples=150, deadline=None)
def test_waste_any_number_is_a_result_or_one_line(flag, value):
    argv = {"--min": "1", "--max": "300", "--block-size": "16", "--json": None, flag: value}
    t0 = time.monotonic()
    result = cli("blocks", "waste", *[f"{k}={v}" if v is not None else k for k, v in argv.items()])
    _check_result(result, time.monotonic() - t0)
