"""Hostile input for `harness golden record|diff`, the golden files and the golden parts of `harness upgrade`
(issue 12: #1, #2, #3, #6, #9, #12, #17, #22, #23, #24, #26, #27). No engine: recordings are written by the store, a
misbehaving server on 127.0.0.1 stands in for the engine, and every refusal of a remote address happens on the parsed
value (netguard sees no attempt)."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import ManifestError
from harness.golden.store import load_recording, write_recording
from harness.manifest import DEFAULT_MANIFEST, load_manifest
from harness.settings import REPO_ROOT
from tests.golden.helpers import choice, meta, record, write
from tests.support import netguard
from tests.support.badserver import BadServer

TOKS = [72, 101, 108, 108, 111]
MANIFEST = str(DEFAULT_MANIFEST)
NEW_MANIFEST = str(REPO_ROOT / "manifests" / "vllm-0.32.0-cpu.yaml")
TINY_SET = """name: tiny
description: two greedy prompts a stand-in server can answer
prompts:
  - id: a
    messages: [{role: user, content: hi}]
  - id: b
    prompt: hello
"""


@pytest.fixture
def tiny_set(tmp_path) -> str:
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY_SET)
    return str(p)


def _rec(path: Path, n: int = 2) -> Path:
    write(path, {"chat": [record(f"p{i}", [choice(TOKS)]) for i in range(n)]})
    return path


def _snapshot(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def _meta_edit(d: Path, fn) -> None:
    m = json.loads((d / "meta.json").read_text())
    fn(m)
    (d / "meta.json").write_text(json.dumps(m))


def _cli(args: list[str], timeout: float = 60, mem: int = 2 << 30) -> subprocess.CompletedProcess:
    """`harness ARGS` in a child with a memory cap and a wall-clock bound: a reader that hangs or grows without bound
    fails the test instead of the machine."""

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=Path.cwd(), capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limits)  # fmt: skip


# --- #1: golden record --url applies the loopback rule on the parsed address, before any socket -------------------


@pytest.mark.parametrize(
    "url, said",
    [("http://8.8.8.8:80", "refusing '8.8.8.8'"), ("http://10.1.2.3:8000", "refusing '10.1.2.3'"),
     ("http://example.com:80", "refusing 'example.com'"), ("ftp://127.0.0.1:21", "need an http(s)://host:port URL"),
     ("http://127.0.0.1:99999", "out of range"), ("http://127.0.0.1:1\n", "control character")],
)  # fmt: skip
def test_1_record_url_refused_before_any_socket(tmp_path, capsys, url, said):
    before = list(netguard.ATTEMPTS)
    rc = main(["golden", "record", MANIFEST, "--url", url, "--out", str(tmp_path / "rec")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("harness: error: --url: ") and said in err and err.count("\n") == 1
    assert netguard.ATTEMPTS == before and not (tmp_path / "rec").exists()


# --- #2 / #3: no URL password, no env secret in a recording or the upgrade report ------------------------------


def test_2_url_userinfo_never_stored_or_printed(tmp_path, capsys, tiny_set):
    out = tmp_path / "rec"
    with BadServer("ok") as s:
        url = s.url.replace("://", "://alice:s3cret-pw@")
        rc = main(["golden", "record", MANIFEST, "--url", url, "--prompts", tiny_set, "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    stored = "".join(p.read_text() for p in out.iterdir())
    assert "s3cret-pw" not in stored + cap.out + cap.err and "alice" not in stored
    meta_ = json.loads((out / "meta.json").read_text())
    assert meta_["base_url"].startswith("http://***@127.0.0.1:")
    assert meta_["hardware"]["torch"] == "unknown (recorded against --url)" and meta_["hardware"]["cpu"]["model"]


def _with_env(m, env):
    return m.model_copy(update={"server": m.server.model_copy(update={"env": dict(m.server.env, **env)})})


def test_3_server_env_secret_never_in_meta_or_upgrade_report(monkeypatch):
    from harness.golden.prompts import load_prompt_set
    from harness.golden.record import build_meta
    from harness.upgrade.compare import manifest_changes as _manifest_changes

    secret = "hf_TOPSECRETvalue123"
    m = _with_env(load_manifest(DEFAULT_MANIFEST), {"HF_TOKEN": secret, "OMP_NUM_THREADS": "2"})
    sets = [load_prompt_set(REPO_ROOT / "golden" / "prompts" / "chat.yaml")]
    meta_ = build_meta(m, sets, identity={"base_url": "http://u:pw@127.0.0.1:1"}, engine_version="0.11.0",
                       timing={}, base_url="http://u:pw@127.0.0.1:1")  # fmt: skip
    text = json.dumps(meta_)
    assert secret not in text and ":pw@" not in text
    env = meta_["server"]["env"]
    assert env["HF_TOKEN"].startswith("sha256:") and env["OMP_NUM_THREADS"] == "2" and env["PYTHONHASHSEED"] == "0"
    old = load_manifest(DEFAULT_MANIFEST)
    changed = _manifest_changes(old, m)["env_changed"]
    assert set(changed) == {"HF_TOKEN", "OMP_NUM_THREADS"} and secret not in json.dumps(changed)
    assert changed["HF_TOKEN"][0] is None and changed["HF_TOKEN"][1].startswith("sha256:")


# --- #6 / #27: golden diff --json never over an input, an existing result, or a directory ---------------------------


def _pair(tmp_path):
    return _rec(tmp_path / "a"), _rec(tmp_path / "b")


@pytest.mark.parametrize("target", ["a/meta.json", "a/chat.jsonl", "b/meta.json", "b/chat.jsonl"])
def test_6_diff_json_never_overwrites_a_recording(tmp_path, capsys, target):
    a, b = _pair(tmp_path)
    before = _snapshot(a), _snapshot(b)
    rc = main(["golden", "diff", str(a), str(b), "--json", str(tmp_path / target), "--force"])
    err = capsys.readouterr().err
    assert rc == 2 and "input of this command" in err
    assert (_snapshot(a), _snapshot(b)) == before
    load_recording(a), load_recording(b)


def test_6_diff_json_existing_result_needs_force(tmp_path, capsys):
    a, b = _pair(tmp_path)
    out = tmp_path / "d.json"
    out.write_text("keep")
    assert main(["golden", "diff", str(a), str(b), "--json", str(out)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err and out.read_text() == "keep"
    assert main(["golden", "diff", str(a), str(b), "--json", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["ok"]


@pytest.mark.parametrize("kind", ["directory", "under-a-file"])
def test_27_diff_bad_output_path_is_one_line(tmp_path, capsys, kind):
    a, b = _pair(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    target = tmp_path / ("adir" if kind == "directory" else "afile/d.json")
    rc = main(["golden", "diff", str(a), str(b), "--json", str(target)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("harness: error: --json ") and err.count("\n") == 1


def test_27_record_out_is_a_file(tmp_path, capsys, tiny_set):
    f = tmp_path / "out"
    f.write_text("not a directory")
    before = list(netguard.ATTEMPTS)
    rc = main(["golden", "record", MANIFEST, "--url", "http://127.0.0.1:1", "--prompts", tiny_set, "--out", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "not a directory" in err and f.read_text() == "not a directory"
    assert netguard.ATTEMPTS == before


def test_27_upgrade_out_is_a_file_refused_before_launching(tmp_path, capsys, monkeypatch):
    import harness.upgrade.run as up

    def no_launch(*a, **k):
        raise AssertionError("an engine was launched")

    monkeypatch.setattr(up, "collect_side", no_launch)
    f = tmp_path / "report"
    f.write_text("x")
    rc = main(["upgrade", MANIFEST, NEW_MANIFEST, "--out", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "not a directory" in err and err.count("\n") == 1 and f.read_text() == "x"


# --- #9: --force deletes only what the recording wrote; the refusal says what is really there ---------------------


def test_9_force_keeps_files_the_recording_did_not_write(tmp_path):
    d = tmp_path / "rec"
    write(d, {"chat": [record("p", [choice(TOKS)])], "old": [record("q", [choice(TOKS)], set_name="old")]})
    (d / "notes.jsonl").write_text('{"mine": 1}\n')
    (d / "other.txt").write_text("mine")
    write(d, {"chat": [record("z", [choice(TOKS)])]}, force=True)
    assert (d / "notes.jsonl").read_text() == '{"mine": 1}\n' and (d / "other.txt").read_text() == "mine"
    assert not (d / "old.jsonl").exists()  # the old recording's own set, listed in its meta.json
    assert list(load_recording(d).sets) == ["chat"]


def test_9_force_never_follows_a_hostile_listing(tmp_path):
    victim = tmp_path / "victim.jsonl"
    victim.write_text("precious\n")
    d = _rec(tmp_path / "rec")
    _meta_edit(d, lambda m: m["sets"].update({"evil": {"file": "../victim.jsonl"}}))
    write(d, {"chat": [record("z", [choice(TOKS)])]}, force=True)
    assert victim.read_text() == "precious\n"


def test_9_unrelated_jsonl_is_not_a_recording(tmp_path):
    d = tmp_path / "rec"
    d.mkdir()
    (d / "notes.jsonl").write_text("{}\n")
    write(d, {"chat": [record("p", [choice(TOKS)])]})  # no recording there: nothing to refuse
    assert (d / "notes.jsonl").read_text() == "{}\n"


def test_9_refusal_says_what_is_there(tmp_path, capsys, tiny_set):
    d = tmp_path / "rec"
    d.mkdir()
    (d / "tiny.jsonl").write_text("{}\n")  # a stray file of the set's name, no meta.json
    rc = main(["golden", "record", MANIFEST, "--url", "http://127.0.0.1:1", "--prompts", tiny_set, "--out", str(d)])
    err = capsys.readouterr().err
    assert rc == 2 and "a recording is already there" not in err
    assert "no meta.json, but it holds tiny.jsonl, which this recording would replace" in err and "--force" in err
    d2 = _rec(tmp_path / "rec2")
    rc = main(["golden", "record", MANIFEST, "--url", "http://127.0.0.1:1", "--out", str(d2)])
    assert rc == 2 and "a recording is already there (meta.json, chat.jsonl)" in capsys.readouterr().err


def test_9_cli_force_record_keeps_unrelated_files(tmp_path, capsys, tiny_set):
    d = tmp_path / "rec"
    with BadServer("ok") as s:
        assert main(["golden", "record", MANIFEST, "--url", s.url, "--prompts", tiny_set, "--out", str(d)]) == 0
        (d / "notes.jsonl").write_text("{}\n")
        assert main(["golden", "record", MANIFEST, "--url", s.url, "--prompts", tiny_set, "--out", str(d),
                     "--force"]) == 0  # fmt: skip
    capsys.readouterr()
    assert (d / "notes.jsonl").read_text() == "{}\n" and list(load_recording(d).sets) == ["tiny"]


# --- #12: thresholds are finite and >= 0, refused before anything is read or launched -----------------------------


BAD_NUMBERS = ["nan", "NaN", "inf", "-inf", "1e400", "-0.1", "-1e-9"]


@pytest.mark.parametrize("flag", ["--tolerance", "--margin"])
@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_12_diff_thresholds_refused(tmp_path, capsys, flag, value):
    gap = {2: [(108, -0.1), (120, -3.1)]}  # a 3-nat regression at token 2
    write(tmp_path / "a", {"chat": [record("p", [choice(TOKS, tops=gap)])]})
    write(tmp_path / "b", {"chat": [record("p", [choice(TOKS[:2] + [120, 1, 2])])]})
    rc = main(["golden", "diff", str(tmp_path / "a"), str(tmp_path / "b"), f"{flag}={value}"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{flag} must be a finite number >= 0" in err and err.count("\n") == 1


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_12_upgrade_thresholds_refused_before_launching(tmp_path, capsys, monkeypatch, value):
    import harness.upgrade.run as up

    def no_launch(*a, **k):
        raise AssertionError("an engine was launched")

    monkeypatch.setattr(up, "collect_side", no_launch)
    monkeypatch.setattr(up, "run_upgrade", no_launch)
    rc = main(["upgrade", MANIFEST, NEW_MANIFEST, "--out", str(tmp_path / "u"), f"--margin={value}"])
    assert rc == 2 and "--margin must be a finite number >= 0" in capsys.readouterr().err


# --- #17: a server that refuses (or garbles) every prompt is no recording --------------------------------------


@pytest.mark.parametrize("mode", ["http400", "markup", "http500", "garbage", "close", "badchunk"])
def test_17_record_url_all_failed_is_an_error_and_writes_nothing(tmp_path, capsys, mode):
    out = tmp_path / "rec"
    with BadServer({"/v1/": mode, "*": "ok"}) as s:
        rc = main(["golden", "record", MANIFEST, "--url", s.url, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1, err  # the engine failed (exit 1), not the input (exit 2): like any HTTP 5xx
    assert err.startswith("harness: error: ") and err.count("\n") == 1
    assert not out.exists() or not any(out.iterdir())


def test_17_all_refused_message_names_the_set(tmp_path, capsys, tiny_set):
    with BadServer("http400") as s:
        rc = main(["golden", "record", MANIFEST, "--url", s.url, "--prompts", tiny_set, "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 1 and "set tiny: the engine refused every prompt (2 of 2; first: HTTP 400" in err


RECORD_IN_CHILD = """
import sys
from harness.golden.prompts import load_prompt_set
from harness.golden.record import EngineResponseError, record_sets
try:
    record_sets(sys.argv[1], "tiny", [load_prompt_set(sys.argv[2])], timeout=2.0)
except EngineResponseError as exc:
    print(exc)
    sys.exit(3)
"""


@pytest.mark.parametrize("mode", ["drip", "stall", "endless", "hugeheaders"])
def test_record_is_bounded_in_time_and_memory(mode, tiny_set):
    """httpx's timeout is per read: a server that drips a byte a second or streams forever must still end the prompt.
    Run in a child with a memory cap and a wall bound, so a reader without bounds fails instead of hanging."""
    with BadServer({"/v1/": mode, "*": "ok"}) as s:
        t0 = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-c", RECORD_IN_CHILD, s.url, tiny_set],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)),
        )
    assert r.returncode == 3 and "prompt tiny/a: request failed" in r.stdout, (r.returncode, r.stderr[-300:])
    assert time.monotonic() - t0 < 30


# --- #22: set files are plain names inside the recording directory, read without blocking ------------------------


@pytest.mark.parametrize(
    "fname",
    ["/dev/zero", "../outside.jsonl", "sub/chat.jsonl", "..", ".hidden.jsonl", "meta.json", 5, None, ["chat.jsonl"]],
)
def test_22_set_file_must_be_a_plain_name(tmp_path, fname):
    good = _rec(tmp_path / "good")
    (tmp_path / "outside.jsonl").write_text("{}\n")
    d = _rec(tmp_path / "rec")
    _meta_edit(d, lambda m: m["sets"]["chat"].update(file=fname))
    r = _cli(["golden", "diff", str(good), str(d)], timeout=60, mem=1 << 30)  # a child: /dev/zero must not fill us
    assert r.returncode == 2, (r.returncode, r.stderr[-300:])
    assert re.search(r"meta\.json: sets\.chat\.file .* plain \*\.jsonl name", r.stderr) and r.stderr.count("\n") == 1


@pytest.mark.parametrize("kind", ["fifo", "symlink-dev-zero", "symlink-outside", "directory"])
def test_22_set_file_special_files_refused_without_blocking(tmp_path, kind):
    good = _rec(tmp_path / "good")
    d = _rec(tmp_path / "rec")
    f = d / "chat.jsonl"
    (tmp_path / "outside.jsonl").write_bytes(f.read_bytes())
    f.unlink()
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "symlink-dev-zero":
        f.symlink_to("/dev/zero")
    elif kind == "symlink-outside":
        f.symlink_to(tmp_path / "outside.jsonl")
    else:
        f.mkdir()
    r = _cli(["golden", "diff", str(good), str(d)], timeout=60, mem=1 << 30)
    assert r.returncode == 2, (r.returncode, r.stderr[-500:])
    assert r.stderr.startswith("harness: error: ") and r.stderr.count("\n") == 1 and "chat.jsonl" in r.stderr


# --- #23 / #24 / #26: nesting, unreadable parts, wrong types: one DataError/ManifestError naming file and line -------


def _deep(n: int = 20000) -> str:
    return "[" * n + "]" * n


def test_23_deep_meta_json(tmp_path, capsys):
    good, d = _pair(tmp_path)
    (d / "meta.json").write_text(_deep())
    assert main(["golden", "diff", str(good), str(d)]) == 2
    err = capsys.readouterr().err
    assert "meta.json" in err and "nested" in err and err.count("\n") == 1


def test_23_deep_record_line(tmp_path, capsys):
    good, d = _pair(tmp_path)
    _meta_edit(d, lambda m: m["sets"]["chat"].pop("sha256"))
    (d / "chat.jsonl").write_text(_deep() + "\n")
    assert main(["golden", "diff", str(good), str(d)]) == 2
    err = capsys.readouterr().err
    assert "chat.jsonl: line 1" in err and "nested" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "text, where",
    [("name: x\nprompts: " + _deep(), "nested"),
     ("name: a\nname: b\ndescription: d\nprompts: [{id: p, prompt: hi}]\n", "duplicate key 'name'"),
     ("name: a\ndescription: d\nprompts: [{id: p, prompt: hi, temperature: .nan, seed: 1}]\n", "only finite numbers"),
     ("name: a\n\xff\xfe: x\n", "not UTF-8")],
)  # fmt: skip
def test_23_prompt_set_yaml_through_the_readers(tmp_path, capsys, text, where):
    from harness.golden.prompts import load_prompt_set

    p = tmp_path / "bad.yaml"
    p.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    with pytest.raises(ManifestError, match=where):
        load_prompt_set(p)
    before = list(netguard.ATTEMPTS)
    rc = main(["golden", "record", MANIFEST, "--url", "http://127.0.0.1:1", "--prompts", str(p),
               "--out", str(tmp_path / "r")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "bad.yaml" in err and err.count("\n") == 1 and netguard.ATTEMPTS == before


def test_24_prompt_set_fifo_not_read(tmp_path):
    p = tmp_path / "fifo.yaml"
    os.mkfifo(p)
    code = (
        "import sys\nfrom harness.errors import ManifestError\nfrom harness.golden.prompts import load_prompt_set\n"
        "try:\n    load_prompt_set(sys.argv[1])\nexcept ManifestError as exc:\n    print(exc)\n    sys.exit(3)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=30)  # may block
    assert r.returncode == 3 and "not a regular file" in r.stdout, (r.returncode, r.stderr[-300:])


@pytest.mark.parametrize(
    "edit, said",
    [(lambda m: m.update(sets={"chat": "x"}), "sets.chat must be an object"),
     (lambda m: m.update(sets={"../chat": {"file": "chat.jsonl"}}), "not a plain name"),
     (lambda m: m.update(model={"sha256": 5}), "model.sha256"),
     (lambda m: m.update(hardware=5), "hardware"),
     (lambda m: m["sets"]["chat"].update(sha256=7), "sets.chat.sha256"),
     (lambda m: m.update(engine=[]), "'engine'"),
     (lambda m: m.update(timing_s=float("nan")), "not valid JSON")],
)  # fmt: skip
def test_26_meta_wrong_types(tmp_path, capsys, edit, said):
    good, d = _pair(tmp_path)
    _meta_edit(d, edit)
    assert main(["golden", "diff", str(good), str(d)]) == 2
    err = capsys.readouterr().err
    assert "meta.json" in err and said in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "edit, said",
    [(lambda r: r.update(request="x"), "request"),
     (lambda r: r.update(request={"temperature": "hot"}), "request"),
     (lambda r: r.update(choices=[], error={"status": 400, "message": 5}), "error"),
     (lambda r: r.update(system_fingerprint={"a": 1}), "system_fingerprint"),
     (lambda r: r.update(response_keys=5), "response_keys"),
     (lambda r: r["choices"][0].update(finish_reason=["stop"]), "finish_reason")],
)  # fmt: skip
def test_26_record_wrong_types(tmp_path, capsys, edit, said):
    good, d = _pair(tmp_path)
    _meta_edit(d, lambda m: m["sets"]["chat"].pop("sha256"))
    lines = (d / "chat.jsonl").read_text().splitlines()
    obj = json.loads(lines[1])
    edit(obj)
    lines[1] = json.dumps(obj)
    (d / "chat.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["golden", "diff", str(good), str(d)]) == 2
    err = capsys.readouterr().err
    assert "chat.jsonl: line 2" in err and said in err and err.count("\n") == 1


def test_26_records_written_are_read_back(tmp_path):
    """The writer and the stricter reader agree: refusals, -Infinity logprobs and fingerprints round-trip."""
    r = record("p", [choice(TOKS, lps=[float("-inf")] + [-0.5] * 4)])
    r["system_fingerprint"] = "fp"
    refusal = record("q", [])
    refusal["error"] = {"status": 400, "type": "BadRequestError", "message": "n must be 1"}
    d = write_recording(tmp_path / "r", meta(), {"chat": [r, refusal]})
    back = load_recording(d).sets["chat"]
    assert back["p"]["choices"][0]["logprobs"][0][1] == float("-inf") and back["q"]["error"]["status"] == 400


# --- a 5xx for a prompt is an engine failure, never that prompt's outcome ----------------------------------------


def _one_prompt(status: int) -> dict | Exception:
    import httpx

    from harness.golden.prompts import resolve_prompt_sets
    from harness.golden.record import record_prompt

    chat = next(s for s in resolve_prompt_sets() if s.name == "chat")
    transport = httpx.MockTransport(lambda req: httpx.Response(status, content=b"Internal Server Error"))
    with httpx.Client(base_url="http://127.0.0.1:9", transport=transport) as client:
        try:
            return record_prompt(client, "tiny", chat.prompts[0], "chat")
        except Exception as exc:  # noqa: BLE001 - the test looks at which kind it is
            return exc


@pytest.mark.parametrize("status", [500, 502, 503])
def test_17_server_errors_are_engine_failures(status):
    from harness.golden.record import EngineResponseError

    exc = _one_prompt(status)
    assert isinstance(exc, EngineResponseError) and f"HTTP {status}" in str(exc)


def test_17_keep_going_leaves_a_failing_set_out_and_keeps_the_others(tmp_path):
    from harness.golden.prompts import load_prompt_set
    from harness.golden.record import UrlEngine, record_with_engine

    chat, cmpl = tmp_path / "chat.yaml", tmp_path / "cmpl.yaml"
    chat.write_text("name: tiny\nprompts:\n  - id: a\n    messages: [{role: user, content: hi}]\n")
    cmpl.write_text("name: cmpl\nprompts:\n  - id: c\n    prompt: hello\n")
    sets = [load_prompt_set(chat), load_prompt_set(cmpl)]
    m = load_manifest(DEFAULT_MANIFEST)
    failed: dict[str, str] = {}
    with BadServer({"/v1/completions": "http500", "*": "ok"}) as s:
        out, records, meta_ = record_with_engine(UrlEngine(s.url, m), m, sets, tmp_path / "r", failed=failed)
    assert set(records) == {"tiny"} and list(failed) == ["cmpl"] and "HTTP 500" in failed["cmpl"]
    assert set(load_recording(tmp_path / "r").prompts()) == {("tiny", "a")}
    with BadServer("http500") as s, pytest.raises(Exception, match="HTTP 500"):
        record_with_engine(UrlEngine(s.url, m), m, sets, tmp_path / "r2")  # without `failed`: all or nothing
    assert not (tmp_path / "r2").exists()


def test_17_a_connection_closed_before_any_answer_is_sent_once_more_and_said():
    # vLLM 0.18.1-0.25.1: after its 400 for an n=2 greedy request the handler raises and uvicorn resets the
    # kept-alive connection; the next request on it dies before any answer
    import httpx

    from harness.golden.prompts import resolve_prompt_sets
    from harness.golden.record import EngineResponseError, record_prompt

    chat = next(s for s in resolve_prompt_sets() if s.name == "chat")
    calls = []

    def answer(req):
        calls.append(req)
        if len(calls) == 1:
            raise httpx.ReadError("[Errno 104] Connection reset by peer")
        return httpx.Response(400, json={"error": {"message": "n must be 1", "type": "BadRequestError"}})

    with httpx.Client(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(answer)) as client:
        rec = record_prompt(client, "tiny", chat.prompts[0], "chat")
    assert len(calls) == 2 and rec["error"]["status"] == 400
    assert rec["connection_retried"] == "ReadError: [Errno 104] Connection reset by peer"

    def always_reset(req):
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.")

    with httpx.Client(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(always_reset)) as client:
        with pytest.raises(EngineResponseError, match="request failed twice"):
            record_prompt(client, "tiny", chat.prompts[0], "chat")
