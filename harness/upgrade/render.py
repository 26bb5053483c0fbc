"""upgrade.md: the upgrade report for a person (the same data as upgrade.json; rendered from it alone, so a saved
report can be rendered again).

Every text in the report came from outside (a server's error, a log line, a version, a metric or flag name, a
package index): it is written through harness.shown (md_text for running text and table cells, md_code inside a code
span, a fence longer than any backtick run for a log tail), so it can never become a link, an image or markup."""

from __future__ import annotations

import re
from typing import Any

from harness.shown import md_code, md_text, shown_lines
from harness.upgrade.model import MISSING, Report, changed, intermittent, verdict_text

__all__ = ["render_markdown"]

_t = md_text


class _Md(str):
    """Markdown already built from escaped parts (a code span, bold text): a table cell keeps it as it is."""


def _code(x: Any) -> _Md:
    return _Md(f"`{md_code(x)}`")


def _bold(x: Any) -> _Md:
    return _Md(f"**{md_text(x)}**")


def _cell(x: Any) -> str:
    return x if isinstance(x, _Md) else md_text(x)


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(md_text(h) for h in head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        out.append("| " + " | ".join(_cell(c) for c in r) + " |")
    return out


def _fenced(text: str) -> list[str]:
    """A log tail as a fenced code block: its controls escaped, and a fence longer than any backtick run in it (a
    line of backticks in the log would otherwise end the block)."""
    body = shown_lines(text)
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", body)), default=0))
    return [fence, body, fence]


def _golden(g: dict[str, Any]) -> list[str]:
    if "refused" in g:
        return [f"**Refused:** {_t(g['refused'])}"]
    lines = [
        f"Tolerance {_t(g['tolerance'])} nats (equivalent), near-tie margin {_t(g['margin'])} nats. "
        f"Counts: {_t(', '.join(f'{k} {v}' for k, v in g['counts'].items()))}.",
        "",
    ]
    if g.get("hardware"):
        lines += [f"Hardware: {_t(g['hardware']['line'])}.", ""]
    if g.get("sets_only_in_a") or g.get("sets_only_in_b"):
        lines.append(f"Sets only in old: {_t(g.get('sets_only_in_a'))}; only in new: {_t(g.get('sets_only_in_b'))}.")
    rows = []
    for p in g["prompts"]:
        where = ""
        if p.get("position") is not None:
            where = (
                f"token {p['position']} after {p['context_text']!r}: old {p['a_token']} / new {p['b_token']}; "
                f"old top {p['a_top'][:3]}"
            )
        rows.append(
            [
                f"{p['set']}/{p['id']}",
                _bold(p["status"]),
                p.get("reason", ""),
                where,
                f"{p.get('max_logprob_drift', 0):.2g}",
            ]
        )
    return lines + _table(["prompt", "class", "reason", "first divergence", "max drift"], rows)


def _engine_change(m: dict[str, Any]) -> list[str]:
    ec = m["engine_change"]
    lines = [
        f"**Engine change** {_t(ec['old']['title'])} → {_t(ec['new']['title'])}: {_t(m['counts']['old'])} metric "
        f"families on the old side, {_t(m['counts']['new'])} on the new (no family-by-family diff: every name differs "
        "by construction). "
        "The series the harness reads, old name → new name:",
        "",
    ]

    def shown(name: str | None, seen: bool) -> str:
        return "none" if name is None else _Md(_code(name) + ("" if seen else " (not in its /metrics)"))

    return lines + _table(
        ["series", ec["old"]["title"], ec["new"]["title"], "note"],
        [
            [x["series"], shown(x["old"], x["old_seen"]), shown(x["new"], x["new_seen"]), x["note"]]
            for x in ec["mapped"]
        ],
    )


def _metrics(m: dict[str, Any]) -> list[str]:
    if m.get("engine_change"):
        return _engine_change(m)
    lines = [f"{_t(m['counts']['old'])} metric families before, {_t(m['counts']['new'])} after."]
    if m.get("hidden_search"):
        lines.append(f"({_t(m['hidden_search'])}.)")
    for key, title in (
        ("removed", "Removed"),
        ("hidden", "Hidden (absent, still in the new source)"),
        ("renamed", "Possibly renamed"),
        ("type_changed", "Type changed"),
    ):
        items = m.get(key) or []
        if not items:
            lines.append(f"- **{title}:** none")
            continue
        if key == "renamed":
            lines.append(f"- **{title}:** " + ", ".join(f"{_code(x['old'])} → {_code(x['new'])}" for x in items))
        elif key == "type_changed":
            lines.append(
                f"- **{title}:** " + ", ".join(f"{_code(x['name'])} {_t(x['old'])}→{_t(x['new'])}" for x in items)
            )
        else:
            lines.append(f"- **{title}:** " + ", ".join(f"{_code(x['name'])} ({_t(x['type'])})" for x in items))
    added = m.get("added") or []
    lines.append(
        f"- **Added ({len(added)}):** "
        + (
            ", ".join(
                f"{_code(x['name'])} ({_t(x['type'])}"
                + (f"; labels {', '.join(_code(n) for n in x['labels'])}" if x["labels"] else "")
                + ")"
                for x in added
            )
            or "none"
        )
    )
    if m.get("label_changes"):
        lines += ["", "**Label names changed:**", ""]
        lines += _table(
            ["metric", "labels added", "labels removed"],
            [
                [
                    _code(x["name"]),
                    _Md(", ".join(map(_code, x["added"])) or "–"),
                    _Md(", ".join(map(_code, x["removed"])) or "–"),
                ]
                for x in m["label_changes"]
            ],
        )
    if m.get("label_value_changes"):
        lines += ["", "**Label values changed** (for `*_info` gauges these are engine settings/defaults):", ""]
        lines += _table(
            ["metric", "label", "old", "new"],
            [[_code(x["name"]), _code(x["label"]), x["old"], x["new"]] for x in m["label_value_changes"]],
        )
    return lines


def _conformance(c: dict[str, Any]) -> list[str]:
    if "not_run" in c:
        return [f"Not compared: {_t(c['not_run'])}"]
    diff = [r for r in c["cases"] if changed(r)]
    rows = [
        [r["id"], r.get("level") or "", verdict_text(r, "old"), verdict_text(r, "new"),
         r.get("new_behaviour") or r.get("new_note", "")[:100]]
        for r in diff
    ]  # fmt: skip
    same: dict[str, int] = {}
    for r in c["cases"]:
        if not changed(r):
            same[r["old"]] = same.get(r["old"], 0) + 1
    new_exp = c.get("expectations_new") or c["expectations"]
    judged = (
        f"Both engines judged under the old engine's expectations (`{md_code(c['expectations'])}`): what the upgrade "
        "changes for clients."
        if new_exp == c["expectations"]
        else "An engine migration: each engine judged under its own expectations (old "
        f"`{md_code(c['expectations'])}`, new `{md_code(new_exp)}`), side by side; a quirk on either side is what that "
        "engine does differently from the reference."
    )
    head = [
        f"{judged} {len(diff)} of {len(c['cases'])} cases change; unchanged: "
        + _t(", ".join(f"{k} {v}" for k, v in sorted(same.items())))
        + " (every case is in upgrade.json).",
        "",
    ]
    if any("inconclusive" in (r["old"], r["new"]) for r in diff):
        head += [
            "`inconclusive`: the model did not do what the case needs on that side (it answered in text where a tool "
            "call was wanted; no reasoning came back): not judged there, so a change to or from it is for review, "
            "never a regression.",
            "",
        ]
    if any(MISSING in (r["old"], r["new"]) for r in diff):
        head += [
            "`missing`: the case was not run on that side (the sides ran other case sets, e.g. another model or "
            "manifest): nothing to compare, never an endpoint removed (that is `absent`).",
            "",
        ]
    if any(intermittent(r, "old") or intermittent(r, "new") for r in diff):
        head += [
            "A rate (`pass 7/10, fail 3/10`) is every outcome of a case judged more than once on that side (`conform "
            "--repeat N`); a change where either side is intermittent (more than one outcome, or one the expectation "
            "lists as known intermittent) is for review: only a difference stable on both sides blocks.",
            "",
        ]
    if any(r["new"] == "quirk-absent" for r in diff):
        head += [
            "`quirk-absent`: a quirk the old expectations declare did not happen; the engine behaved like the "
            "reference there (not a failure).",
            "",
        ]
    body = _table(["case", "level", "old", "new", "new behaviour / note"], rows) if rows else ["No change."]
    return head + body + _error_bodies(c.get("error_bodies") or [])


def _error_bodies(changes: list[dict[str, Any]]) -> list[str]:
    """The error objects of the error cases, old -> new, field by field (compare.error_body_changes)."""
    if not changes:
        return []
    rows = [[c["id"], f["field"], _code(f["old"]), _code(f["new"]), f["level"]] for c in changes for f in c["fields"]]
    return ["", "**Error bodies** (the error object each error case saw, field by field):", ""] + _table(
        ["case", "field", "old", "new", "level"], rows
    )


def _surface(a: dict[str, Any]) -> list[str]:
    """The pre-launch argument check: the manifests' flags against the new release's own parser, then the release
    diff (harness.upgrade.arguments)."""
    ns, os_ = a.get("new_surface") or {}, a.get("old_surface") or {}
    lines = [
        "Checked before any engine was launched"
        + (f" ({_t(a['seconds'])} s)" if a.get("seconds") is not None else "")
        + ": "
        + (
            f"new release {_t(ns['release'])}: {_t(ns['flags'])} flags ({_t(ns['captured_with'])})"
            if "release" in ns
            else f"new release: {_t(ns.get('unavailable'))}"
        )
        + "; "
        + (
            f"old release {_t(os_['release'])}: {_t(os_['flags'])} flags."
            if "release" in os_
            else f"old: {_t(os_.get('unavailable'))}."
        ),
        "",
    ]
    rows = [
        [
            _code(p["flag"]),
            _bold(p["problem"]),
            _Md(f"{_code(p['to'])} ({_t(p.get('rule'))})") if p.get("to") else "",
            p["line"],
        ]
        for p in a.get("old_args") or []
    ]
    lines += (
        ["Old manifest's server.args on the new release:", ""]
        + _table(["flag", "finding", "renamed to", "detail"], rows)
        if rows
        else ["Old manifest's server.args on the new release: every flag accepted, no default it sets moved."]
    )
    if a.get("new_args"):
        lines += ["", "New manifest's own server.args rejected by its release:", ""]
        lines += [f"- {_code(p['flag'])}: {_t(p['line'])}" for p in a["new_args"]]
    if a.get("launch_refused"):
        lines += ["", f"**No engine was launched:** {_t(a['launch_refused'])}."]
    rel = a.get("release")
    if rel:
        lines += [
            "",
            f"Release to release ({_t(rel['old'])} → {_t(rel['new'])}; {_t(rel['counts']['old'])} → "
            f"{_t(rel['counts']['new'])} flags): {_t(rel['removed_count'])} removed, {_t(rel['renamed_count'])} "
            f"renamed, {_t(rel['added_count'])} added, {_t(rel['aliases_removed_count'])} spellings gone, "
            f"{_t(rel['defaults_changed_count'])} defaults changed"
            + (
                f", {len(rel['config_defaults_changed'])} config objects' defaults changed"
                if rel.get("config_defaults_changed")
                else ""
            )
            + ".",
            "",
        ]
        if rel.get("removed"):
            lines.append("- **Removed:** " + ", ".join(_code(x["flag"]) for x in rel["removed"]))
        if rel.get("renamed"):
            lines.append(
                "- **Renamed:** "
                + ", ".join(f"{_code(x['flag'])} → {_code(x['to'])} ({_t(x['rule'])})" for x in rel["renamed"])
            )
        if rel.get("aliases_removed"):
            lines.append("- **Spellings gone:** " + ", ".join(_code(x) for x in rel["aliases_removed"]))
        if rel.get("deprecated"):
            lines.append("- **Newly deprecated:** " + ", ".join(_code(x) for x in rel["deprecated"]))
        if rel.get("defaults_changed"):
            lines += ["", "Defaults changed:", ""]
            lines += _table(
                ["flag", "old default", "new default"],
                [[_code(d["flag"]), _code(d["old"]), _code(d["new"])] for d in rel["defaults_changed"]],
            )
        if rel.get("config_defaults_changed"):
            lines += [
                "",
                "Config objects whose defaults changed: " + ", ".join(_code(x) for x in rel["config_defaults_changed"]),
            ]
        if rel.get("added"):
            lines += ["", "- **Added:** " + ", ".join(_code(x) for x in rel["added"])]
    return lines


def render_markdown(r: Report) -> str:
    v = r["verdict"]
    old, new, cmp = r["old"], r["new"], r["comparison"]
    L = [
        f"# Upgrade report: {_t(old['name'])} → {_t(new['name'])}",
        "",
        f"## Verdict: {_bold(v['verdict'].upper())}",
        "",
    ]
    for x in v["reasons"]:
        L.append(f"- {_bold(x['level'])}: {_t(x['text'])}")
    L += ["", "## Engines", ""]
    rows = []
    for s in (old, new):
        ident = s.get("identity") or {}
        ran = "yes" if s["ok"] else f"NO: {s.get('error')}"
        rows.append(
            [
                s["name"],
                ident.get("version") or s["engine"]["version"],
                ran,
                s.get("ready_seconds"),
                s.get("golden_seconds"),
                s.get("conformance_seconds"),
                s.get("wall_seconds"),
            ]
        )
    L += _table(["manifest", "engine /version", "ran", "ready s", "golden s", "conformance s", "total s"], rows)
    for s in (old, new):
        if not s["ok"] and s.get("log_tail"):
            L += ["", f"Engine log tail ({_t(s['name'])}):", "", *_fenced(s["log_tail"][-1500:])]
    L += ["", "## Golden outputs", ""]
    L += _golden(cmp["golden"]) if "golden" in cmp else ["Not compared (an engine did not produce a recording)."]
    L += ["", "## Wire shape (non-streaming responses of the golden prompts)", ""]
    for ep, w in (cmp.get("wire") or {}).items():
        L.append(
            f"- {_bold(ep)}: keys added {', '.join(map(_code, w['added'])) or 'none'}; "
            f"removed {', '.join(map(_code, w['removed'])) or 'none'}"
        )
    fp = cmp.get("system_fingerprint")
    if fp:
        L.append(f"- **system_fingerprint**: old {_t(fp['old'] or 'absent')} → new {_t(fp['new'] or 'absent')}")
    L += ["", "## Metric surface", ""]
    L += _metrics(cmp["metrics"]) if "metrics" in cmp else ["Not compared."]
    L += ["", "## Conformance (old expectations, side by side)", ""]
    L += _conformance(cmp.get("conformance", {}))
    mc = cmp.get("manifest", {})
    L += ["", "## Manifests, arguments and locked packages", ""]
    L.append(f"- engine version: {_t(mc.get('engine_version'))}")
    L.append(
        f"- server args identical: {_t(mc.get('args_identical'))} (added {_t(mc.get('args_added'))}, "
        f"removed {_t(mc.get('args_removed'))})"
    )
    if mc.get("surface"):
        L += ["", "### Flags against the new release's own argument surface", ""] + _surface(mc["surface"]) + [""]
    L.append(f"- server env changes: {_t(mc.get('env_changed') or 'none')}")
    L.append(f"- same model: {_t(mc.get('model_same'))}")
    rt = mc.get("python_runtime") or [None, None]
    if rt[0] and rt[1] and rt[0].get("platform_plugin") != rt[1].get("platform_plugin"):
        L.append(f"- CPU platform plugin: {_t(rt[0].get('platform_plugin'))} → {_t(rt[1].get('platform_plugin'))}")
    lock = mc.get("lock") or {}
    if lock:
        L.append(
            f"- locked packages: {len(lock.get('changed', {}))} changed, {len(lock.get('added', {}))} added, "
            f"{len(lock.get('removed', {}))} removed"
        )
        if lock.get("changed"):
            L += [""] + _table(["package", "old", "new"], [[k, a, b] for k, (a, b) in lock["changed"].items()])
        if lock.get("added"):
            L += ["", "Added: " + _t(", ".join(f"{k}=={x}" for k, x in lock["added"].items()))]
        if lock.get("removed"):
            L += ["", "Removed: " + _t(", ".join(f"{k}=={x}" for k, x in lock["removed"].items()))]
    models = cmp.get("models") or {}
    if models:
        L += ["", f"- /v1/models old: {_t(models.get('old'))}", f"- /v1/models new: {_t(models.get('new'))}"]
    s = r["settings"]
    L += [
        "",
        "---",
        f"Prompt sets {_t(s['prompt_sets'])}; tolerance {_t(s['tolerance'])}; margin {_t(s['margin'])}; "
        f"created {_t(r['created_at'])}; wall time {_t(r['wall_seconds'])} s. "
        "Recordings and metrics scrapes are beside this file.",
    ]
    return "\n".join(L) + "\n"
