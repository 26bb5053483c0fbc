"""Each verdict rule on its own: what it reads from the comparison and which reasons it gives."""

from __future__ import annotations

from harness.upgrade import judge as J

RAN = {"name": "x", "ok": True}


def test_an_empty_comparison_asks_for_review_of_what_was_not_compared():
    v = J.judge(RAN, RAN, {})
    assert v["verdict"] == "review"
    assert [r["text"] for r in v["reasons"]] == [
        "metrics surface not compared (a /metrics scrape failed)",
        "conformance not compared: None",
    ]


def test_engines_rule_blocks_on_a_failed_side():
    failed = {"name": "new", "ok": False, "error": "StartupTimeout: not ready"}
    assert J.engines(RAN, failed, {}) == [
        {"level": "blocking", "text": "the new engine (new) failed: StartupTimeout: not ready"}
    ]
    assert J.metrics(RAN, failed, {}) == []  # no scrape to miss when an engine did not run


def test_golden_rule_lists_at_most_eight_prompts():
    prompts = [{"set": "chat", "id": f"p{i}", "status": "regression"} for i in range(10)]
    (r,) = J.golden(RAN, RAN, {"golden": {"counts": {"regression": 10}, "prompts": prompts}})
    assert r["level"] == "blocking" and r["text"].endswith("chat/p6, chat/p7") and "p8" not in r["text"]
    assert J.golden(RAN, RAN, {"golden": {"refused": "different models"}})[0]["level"] == "blocking"


def test_arguments_rule_reads_engine_defaults_from_info_labels():
    m = {
        "label_value_changes": [
            {"name": "vllm:cache_config_info", "label": "block_size", "old": "16", "new": "128"},
            {"name": "vllm:other_total", "label": "x", "old": "a", "new": "b"},
        ]
    }
    assert J.arguments(RAN, RAN, {"metrics": m}) == [
        {"level": "review", "text": "engine defaults changed (visible in *_info labels): block_size 16->128"}
    ]


def test_wire_rule_sees_changed_keys_and_a_new_fingerprint():
    cmp = {
        "wire": {"chat": {"added": ["system_fingerprint"], "removed": []}, "completions": {"added": [], "removed": []}},
        "system_fingerprint": {"old": [], "new": ["fp"]},
    }
    assert [r["text"] for r in J.wire(RAN, RAN, cmp)] == [
        "chat response keys changed: +['system_fingerprint'] -[]",
        "system_fingerprint appears: fp",
    ]


def test_conformance_rule_levels():
    rows = [
        {"id": "a", "level": "MUST", "old": "pass", "new": "fail", "new_behaviour": "broken"},
        {"id": "b", "level": "SHOULD", "old": "pass", "new": "error", "new_behaviour": ""},
        {"id": "c", "level": "MUST", "old": "pass", "new": "quirk", "new_behaviour": "version-mismatch"},
        {"id": "d", "level": "INFO", "old": "pass", "new": "fail", "new_behaviour": ""},
    ]
    got = [(r["level"], r["text"]) for r in J.conformance(RAN, RAN, {"conformance": {"cases": rows}})]
    assert got == [
        ("review", "conformance changes the upgrade itself makes: c (version-mismatch)"),
        ("blocking", "conformance (old expectations): now failing: a (broken)"),
        ("review", "conformance (old expectations): SHOULD-level cases now failing: b (error)"),
        ("review", "conformance verdict changes: b pass->error, d pass->fail"),
    ]  # b: listed twice, as before


def test_packages_rule_is_information():
    lock = {"changed": {"torch": ["2.8.0", "2.9.0"], "six": ["1", "2"]}, "added": {"new": "1"}, "removed": {}}
    assert J.packages(RAN, RAN, {"manifest": {"lock": lock}}) == [
        {"level": "info", "text": "locked packages: 2 changed, 1 added, 0 removed (torch 2.8.0->2.9.0)"}
    ]
    assert J.packages(RAN, RAN, {"manifest": {"lock": {}}}) == []


def test_conformance_rule_names_endpoints_that_appear_or_go():
    rows = [
        {"id": "messages.create.shape", "level": "MUST", "old": "absent", "new": "pass", "new_behaviour": ""},
        {"id": "messages.stop-sequences", "level": "MUST", "old": "absent", "new": "fail", "new_behaviour": "x"},
        {"id": "responses.store", "level": "MUST", "old": "quirk", "new": "absent", "new_behaviour": "status-404"},
    ]
    got = [(r["level"], r["text"]) for r in J.conformance(RAN, RAN, {"conformance": {"cases": rows}})]
    assert got == [
        ("info", "conformance: endpoints the new engine serves (absent before): messages.create.shape (pass), "
                 "messages.stop-sequences (fail)"),
        ("blocking", "conformance: endpoints the new engine no longer serves (now absent): responses.store (was quirk)"),
    ]  # fmt: skip
