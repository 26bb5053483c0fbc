"""pytest plugin (pytest11 entry point): run the conformance suite inside a team's own pytest run.

    pytest --harness-url http://127.0.0.1:8000 --harness-expect vllm-0.11
    pytest --harness-manifest manifests/vllm-0.11.0-cpu.yaml          # launches the engine for the session

Without either option the plugin does nothing. Every case becomes one test item `harness::<case id>`; fail/error
fail the item, skip and absent (an endpoint not served) skip, pass/quirk/quirk-absent/info pass (quirks and quirk-absent cases, declared quirks that did
not happen, are printed in the summary: the engine behaves like the reference there, so no item fails for it).
Options are mirrored by ini keys (harness_url, harness_manifest, harness_expect) and env HARNESS_URL / HARNESS_MANIFEST /
HARNESS_EXPECT; precedence CLI > env > ini. The URL must be loopback (the one rule of harness.net.loopback_url), checked
on the parsed address when pytest configures, before any socket: anything else is a usage error and nothing is sent.
With a URL the expectation file is required (`--harness-expect openai` for the plain reference), as `conform --url`.
"""

from __future__ import annotations

import os

import pytest

OPTIONS = {
    "harness_url": ("--harness-url", "HARNESS_URL", "attach the conformance suite to a running engine (loopback URL)"),
    "harness_manifest": (
        "--harness-manifest",
        "HARNESS_MANIFEST",
        "launch this engine manifest for the conformance suite",
    ),
    "harness_expect": (
        "--harness-expect",
        "HARNESS_EXPECT",
        "expectation name or YAML (`openai` for the plain reference); required with --harness-url, default from the"
        " manifest with --harness-manifest",
    ),
}
REPORT_KEY = pytest.StashKey[dict]()
URL_KEY = pytest.StashKey[str]()


def pytest_addoption(parser):
    group = parser.getgroup("harness", "LLM engine conformance suite")
    for ini, (flag, _env, help_) in OPTIONS.items():
        group.addoption(flag, dest=ini, default=None, help=help_)
        parser.addini(ini, help_)


def get_settings(config) -> dict:
    out = {}
    for ini, (_flag, env, _help) in OPTIONS.items():
        out[ini] = config.getoption(ini) or os.environ.get(env) or config.getini(ini) or None
    return out


def _source(config, ini: str) -> str:
    flag, env, _ = OPTIONS[ini]
    return flag if config.getoption(ini) else env if os.environ.get(env) else f"ini {ini}"


def pytest_configure(config):
    config.addinivalue_line("markers", "harness_case(id): a conformance case run by the harness plugin")
    url = get_settings(config)["harness_url"]
    if url:
        from harness.conformance.expectations import required_expectation
        from harness.errors import HarnessError
        from harness.net import loopback_url

        try:
            config.stash[URL_KEY] = loopback_url(url, what=_source(config, "harness_url"))
            # the rule of `conform --url`: a server of unknown kind is never judged by the plain reference silently
            required_expectation(get_settings(config)["harness_expect"], option="--harness-expect",
                                 target=_source(config, "harness_url"))  # fmt: skip
        except HarnessError as exc:
            raise pytest.UsageError(f"harness: {exc.one_line()}") from None


class HarnessCaseItem(pytest.Item):
    def __init__(self, *, case, **kw):
        super().__init__(**kw)
        self.case = case
        self.add_marker(pytest.mark.harness_case(case.id))

    def runtest(self):
        from harness.conformance.model import FAILING

        doc = _report(self.config)
        r = doc["by_id"].get(self.case.id)
        if r is None and self.case.needs:  # not selected: the server does not provide what the case needs
            pytest.skip(f"needs {', '.join(sorted(self.case.needs))}, which this server does not provide")
        if r is None:
            pytest.fail("case did not run", pytrace=False)
        if r["verdict"] == "skip":
            pytest.skip(r["note"])
        if r["verdict"] == "absent":  # the endpoint is not served: nothing to judge
            pytest.skip(f"absent: {r['note']}")
        if r["verdict"] == "inconclusive":  # the model did not do what the case needs: not judged
            pytest.skip(f"inconclusive: {r['behaviour']}: {r['note']}")
        if r["verdict"] in FAILING:
            raise HarnessCaseFailure(r)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, HarnessCaseFailure):
            r = excinfo.value.result
            return (
                f"{r['id']} [{r['level']}] {r['requirement']}\n  verdict: {r['verdict']} ({_tags(r)})\n"
                f"  expected: {r['expected']!r}\n  actual:   {r['actual']!r}\n  chunk: {r['chunk']}\n  note: {r['note']}"
            )
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"harness::{self.case.id}"


def _tags(r: dict) -> str:
    return "+".join(r.get("behaviours") or []) or r.get("behaviour") or ""


class HarnessCaseFailure(Exception):
    def __init__(self, result):
        super().__init__(result["id"])
        self.result = result


class HarnessCollector(pytest.Collector):
    def collect(self):
        from harness.conformance.suite import all_cases

        for c in all_cases():
            yield HarnessCaseItem.from_parent(self, name=c.id, case=c)


def pytest_collection_modifyitems(session, config, items):
    s = get_settings(config)
    if not (s["harness_url"] or s["harness_manifest"]):
        return
    col = HarnessCollector.from_parent(session, name="harness")
    items.extend(col.collect())


def _report(config) -> dict:
    if REPORT_KEY in config.stash:
        return config.stash[REPORT_KEY]
    from harness.conformance.case import provided_by
    from harness.conformance.expectations import default_expectation, load_expectations
    from harness.conformance.runner import new_ctx, run_suite_sync
    from harness.settings import api_key_from_env

    s = get_settings(config)
    if s["harness_url"]:
        exp = load_expectations(s["harness_expect"])
        rep = run_suite_sync(new_ctx(config.stash[URL_KEY], exp, api_key=api_key_from_env(None)))
    else:
        from harness.launch.session import launch
        from harness.manifest import load_manifest

        m = load_manifest(s["harness_manifest"])
        exp = load_expectations(s["harness_expect"] or default_expectation(m.engine.kind, m.engine.version))
        with launch(m) as eng:
            rep = run_suite_sync(
                new_ctx(
                    eng.base_url, exp, api_key=eng.api_key, model=eng.served_name, engine=eng, provides=provided_by(m)
                )
            )
    doc = rep.to_dict()
    doc["by_id"] = {r["id"]: r for r in doc["cases"]}
    config.stash[REPORT_KEY] = doc
    return doc


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if REPORT_KEY not in config.stash:
        return
    doc = config.stash[REPORT_KEY]
    tr = terminalreporter
    tr.section(f"harness conformance ({doc['expectations']})")
    tr.write_line("  ".join(f"{k}={v}" for k, v in doc["counts"].items()))
    for r in doc["cases"]:
        if r["verdict"] == "quirk":
            tr.write_line(f"quirk {r['id']}: {_tags(r)} — {r['quirk_reason']}")
        elif r["verdict"] == "quirk-absent":
            tr.write_line(f"quirk-absent {r['id']}: {r['note']}")
    if doc.get("unexpected_passes"):
        tr.write_line(
            f"quirk-absent (declared quirk did not happen; not a failure): {', '.join(doc['unexpected_passes'])}"
        )
    if doc.get("aborted"):
        tr.write_line(f"aborted: {doc['aborted']}")
