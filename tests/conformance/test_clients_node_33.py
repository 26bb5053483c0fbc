"""Issue 33, items 1 and 6 for a Node client (the Vercel AI SDK, harness/clients/npm.py): its npm lock is pinned by
sha256 and must be exact and hashed throughout (every package a https://registry.npmjs.org/ tarball with a sha512
integrity, which `npm ci` checks), or it is refused before npm runs; its driver runs with node from a copy beside the
client's node_modules, and what it prints is read like a Python driver's (bounded, scrubbed, escaped).

Node is needed by the tests that run a driver: without it they skip here and fail under CI=true. The last test
installs the real lock (npm ci, from the registry or the harness's npm cache) and runs the real driver through the
loopback proxy against a mocked engine (marked slow: it runs after tests/support/prepare.py has installed it)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import httpx
import pytest

from harness.clients import env as client_env
from harness.clients import npm
from harness.clients.env import ClientEnv, install_client, installed_client, verify_lock
from harness.clients.npm import NPM_LOCK, NPM_PACKAGE, NPM_REGISTRY, check_npm_lock
from harness.clients.proxy import LoopbackProxy
from harness.clients.run import run_driver
from harness.clients.spec import CLIENTS, FEATURES, RUNTIMES
from harness.conformance.cases.clients import judge_result
from harness.conformance.evidence import EvidenceRecorder
from harness.errors import InstallError, PinMismatch
from tests.conftest import unavailable

KEY = "sk-run-key-0123456789abcdef"
SPEC = CLIENTS["vercel-ai"]


def _copy(tmp_path: Path) -> Path:
    lock = tmp_path / SPEC.lock_name
    shutil.copytree(SPEC.lock, lock)
    return lock


def _edit(lock: Path, change) -> Path:
    """Change the copy's package-lock.json (a parsed document) and pin its new hash: only the content check is left."""
    doc = json.loads((lock / NPM_LOCK).read_text())
    change(doc)
    (lock / NPM_LOCK).write_text(json.dumps(doc, indent=2) + "\n")
    return lock


def _pinned(lock: Path):
    return dataclasses.replace(SPEC, lock_sha256=hashlib.sha256((lock / NPM_LOCK).read_bytes()).hexdigest())


# -- the spec: data ----------------------------------------------------------------------------------------------------


def test_vercel_ai_spec_is_a_node_client_with_its_lock_directory():
    assert SPEC.runtime == "node" and set(RUNTIMES) == {"python", "node"}
    assert all(s.runtime == "python" for n, s in CLIENTS.items() if n != "vercel-ai")
    assert SPEC.lock.is_dir() and verify_lock(SPEC) == SPEC.lock
    assert SPEC.driver.suffix == ".mjs" and SPEC.driver.is_file() and set(SPEC.features) <= set(FEATURES)
    assert SPEC.features == ("chat", "stream", "tools", "parallel", "structured", "responses", "responses-tools",
                             "messages", "messages-stream", "messages-tools")  # fmt: skip
    deps = json.loads((SPEC.lock / NPM_PACKAGE).read_text())["dependencies"]
    providers = {"@ai-sdk/openai-compatible", "@ai-sdk/openai", "@ai-sdk/anthropic"}
    assert deps["ai"] == SPEC.version and providers <= set(deps)
    assert SPEC.lock_sha256 == hashlib.sha256((SPEC.lock / NPM_LOCK).read_bytes()).hexdigest()


def test_the_committed_lock_is_version_3_and_every_package_is_hashed_from_npmjs():
    doc = json.loads((SPEC.lock / NPM_LOCK).read_text())
    assert doc["lockfileVersion"] == 3
    entries = {k: v for k, v in doc["packages"].items() if k}
    assert entries and all(v["resolved"].startswith(NPM_REGISTRY) and v["integrity"].startswith("sha512-")
                           for v in entries.values())  # fmt: skip


# -- the lock: refused before npm runs ---------------------------------------------------------------------------------


def test_tampered_lock_is_refused_before_install(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    built: list[object] = []
    monkeypatch.setattr(client_env, "npm_env", lambda *a, **k: built.append(a))
    lock = _copy(tmp_path)
    text = (lock / NPM_LOCK).read_text()
    (lock / NPM_LOCK).write_text(text.replace('"version": "6.0.333"', '"version": "6.0.332"', 1))
    with pytest.raises(PinMismatch, match=rf"client vercel-ai lock {SPEC.lock_name} sha256 mismatch.*pinned d9ce2256"):
        install_client(SPEC, lock)
    with pytest.raises(PinMismatch):
        installed_client(SPEC, lock)
    assert built == [] and not (tmp_path / "home").exists()  # no npm, no directory


def test_a_lock_directory_without_its_lock_is_refused(tmp_path):
    lock = _copy(tmp_path)
    (lock / NPM_LOCK).unlink()
    with pytest.raises(InstallError, match="no such client lock file"):
        verify_lock(SPEC, lock)


def _drop(key: str, field: str):
    return lambda doc: doc["packages"][key].pop(field)


def _set(key: str, field: str, value: object):
    return lambda doc: doc["packages"][key].__setitem__(field, value)


ZOD = "node_modules/zod"


@pytest.mark.parametrize(
    ("change", "want"),
    [
        (_drop(ZOD, "integrity"), "node_modules/zod: no sha512 integrity"),
        (_set(ZOD, "integrity", "sha1-2jmj7l5rSw0yVb/vlWAYkK/YBwk="), "no sha512 integrity"),
        (_set(ZOD, "resolved", "https://registry.example.com/zod/-/zod-4.6.7.tgz"), "is not a https://registry.npmjs.org/"),
        (_set(ZOD, "resolved", "http://registry.npmjs.org/zod/-/zod-4.6.7.tgz"), "is not a https://registry.npmjs.org/"),
        (_set(ZOD, "resolved", "git+https://github.com/colinhacks/zod.git#abc"), "is not a https://registry.npmjs.org/"),
        (_set(ZOD, "resolved", "https://registry.npmjs.org.evil.example/zod/-/zod-4.6.7.tgz"), "is not a https"),
        (_set(ZOD, "resolved", "file:../zod-4.6.7.tgz"), "is not a https://registry.npmjs.org/"),
        (_drop(ZOD, "resolved"), "resolved None is not a"),
        (_set(ZOD, "link", True), "a link or bundled package"),
        (_set(ZOD, "version", "^4.6.7"), "is not exact"),
        (lambda doc: doc.__setitem__("lockfileVersion", 2), "lockfileVersion 2 is not 3"),
        (lambda doc: doc["packages"][""]["dependencies"].__setitem__("zod", "4.6.6"), "root entry does not match"),
        (lambda doc: doc["packages"].__setitem__("../outside", {}), "is not a registry package"),
    ],
)  # fmt: skip
def test_a_lock_that_is_not_exact_and_hashed_is_refused_even_when_its_pin_matches(tmp_path, change, want):
    lock = _edit(_copy(tmp_path), change)
    with pytest.raises(InstallError, match="not an exact, hashed lock") as exc:
        verify_lock(_pinned(lock), lock)
    assert want in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("package", "want"),
    [
        ({"scripts": {"postinstall": "curl evil"}}, "has 'scripts'"),
        ({"overrides": {"zod": "3.0.0"}}, "has 'overrides'"),
        ({"dependencies": {"ai": "^6.0.333"}}, "is not an exact version"),
        ({"dependencies": {}}, "names no dependencies"),
    ],
)
def test_a_package_json_npm_would_act_on_is_refused(tmp_path, package, want):
    lock = _copy(tmp_path)
    doc = json.loads((lock / NPM_PACKAGE).read_text())
    (lock / NPM_PACKAGE).write_text(json.dumps({**doc, **package}))
    with pytest.raises(InstallError, match=want):
        verify_lock(SPEC, lock)  # the lock itself is the pinned one: package.json is checked against it


def test_check_npm_lock_names_a_dependency_the_lock_does_not_install():
    lock = json.loads((SPEC.lock / NPM_LOCK).read_text())
    lock["packages"][""]["dependencies"]["left-pad"] = "1.3.0"
    package = {"name": "x", "dependencies": lock["packages"][""]["dependencies"]}
    with pytest.raises(ValueError, match="left-pad 1.3.0 is not the version the lock installs"):
        check_npm_lock(json.dumps(lock), json.dumps(package))


# -- no node: not installed here, an install error there (a failure under CI=true in the engine tests) ---------------


def test_without_node_the_client_is_not_installed_and_cannot_be_built(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(npm, "find_node", lambda: None)
    monkeypatch.setattr(client_env, "find_node", lambda: None)
    assert installed_client(SPEC) is None
    with pytest.raises(InstallError, match="node and npm are needed"):
        install_client(SPEC)
    assert not (tmp_path / "home").exists()


# -- the install: npm ci in a temporary directory, renamed when complete (a fake npm: no network here) -------------


def _fake_tools(tmp_path: Path, npm_body: str) -> tuple[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    node, fake_npm = bin_dir / "node", bin_dir / "npm"
    node.write_text("#!/bin/sh\necho v20.20.2\n")
    fake_npm.write_text(f'#!/bin/sh\necho "$@" > ../npm-args\n{npm_body}\n')
    for f in (node, fake_npm):
        f.chmod(0o755)
    return str(node), str(fake_npm)


def test_npm_ci_builds_aside_and_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("npm_config_registry", "https://registry.example.com/")  # the user's: not what npm is told
    tools = _fake_tools(tmp_path, "test -f package-lock.json && env > ../npm-env && mkdir -p node_modules/ai")
    monkeypatch.setattr(npm, "find_node", lambda: tools)
    monkeypatch.setattr(client_env, "find_node", lambda: tools)
    assert installed_client(SPEC) is None
    env = install_client(SPEC)
    assert env.modules is not None and (env.modules / "ai").is_dir() and env.command == (tools[0],)
    assert env.root.parent == tmp_path / "home" / "tools" and env.root.name.startswith("client-vercel-ai-")
    assert sorted(p.name for p in env.root.parent.iterdir()) == [env.root.name, "npm-args", "npm-env"]  # none left
    args = (env.root.parent / "npm-args").read_text().split()
    assert args[:4] == ["ci", "--ignore-scripts", "--no-audit", "--no-fund"] and f"--registry={NPM_REGISTRY}" in args
    assert "registry.example.com" not in (env.root.parent / "npm-env").read_text()
    assert installed_client(SPEC) == env and install_client(SPEC) == env  # reused by its marker


def test_a_failed_npm_ci_says_npms_error_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    said = "npm error code EINTEGRITY\nnpm error sha512-x integrity checksum failed\nnpm error A complete log: /x"
    tools = _fake_tools(tmp_path, f"mkdir node_modules\nprintf '{said}\\n' >&2\nexit 1")
    monkeypatch.setattr(npm, "find_node", lambda: tools)
    want = (
        r"npm ci --ignore-scripts \(vercel-ai-6.0.333\) failed: code EINTEGRITY / sha512-x integrity checksum failed$"
    )
    with pytest.raises(InstallError, match=want):
        install_client(SPEC)
    assert [p.name for p in (tmp_path / "home" / "tools").iterdir()] == ["npm-args"]  # the build removed, no env


# -- the driver: run with node beside its node_modules; its output untrusted ----------------------------------------


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        unavailable("node is not installed (the Vercel AI SDK client's runtime)")
    return str(node)


def _fake_env(tmp_path: Path) -> ClientEnv:
    """A node_modules with one package, `fakepkg`, that says where it was loaded from."""
    root = tmp_path / "env"
    pkg = root / "node_modules" / "fakepkg"
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"name": "fakepkg", "version": "1.0.0", "type": "module",
                                                  "exports": {".": "./index.mjs"}}))  # fmt: skip
    (pkg / "index.mjs").write_text("export const where = import.meta.url;\n")
    return ClientEnv(root, (_node(),), root / "node_modules")


def _driver(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "drivers"
    d.mkdir(exist_ok=True)
    p = d / "driver.mjs"
    p.write_text(body)
    return p


def _run(env: ClientEnv, driver: Path, timeout_s: float = 20.0):
    home = driver.parent.parent / "home"
    home.mkdir(exist_ok=True)
    return asyncio.run(run_driver(env, driver, base_url="http://127.0.0.1:9", model="m", feature="chat",
                                  timeout_s=timeout_s, secrets=[KEY], home=home))  # fmt: skip


def test_node_driver_imports_from_the_clients_node_modules_and_is_scrubbed(tmp_path):
    env = _fake_env(tmp_path)
    driver = _driver(tmp_path, "import { where } from 'fakepkg';\n"
                     f"process.stderr.write('warn \\x1b[31m {KEY}\\n');\n"
                     "console.log(JSON.stringify({ok: true, text: `from ${where} ${process.argv.slice(2).join(' ')} "
                     f"{KEY}`, node: process.execPath}}));\n")  # fmt: skip
    out = _run(env, driver)
    assert out.result is not None and out.problem == "", out
    text = out.result["text"]
    assert str(env.modules / "fakepkg" / "index.mjs") in text  # resolved through the staged link to the env's own
    assert "--base-url http://127.0.0.1:9 --model m --feature chat" in text and KEY not in text and "***" in text
    assert "\x1b" not in out.stderr_tail and KEY not in out.stderr_tail
    assert not list((tmp_path / "home").iterdir())  # the staged copy is gone with its run


def test_node_driver_without_its_modules_cannot_import_them(tmp_path):
    env = dataclasses.replace(_fake_env(tmp_path), modules=None)  # run in place: no node_modules beside it
    out = _run(env, _driver(tmp_path, "import { where } from 'fakepkg';\nconsole.log('{\"ok\": true}');\n"))
    assert out.result is None and "printed nothing" in out.problem and "exit code 1" in out.problem
    assert "fakepkg" in out.stderr_tail


def test_hanging_node_driver_is_killed(tmp_path):
    env = _fake_env(tmp_path)
    out = _run(env, _driver(tmp_path, "setInterval(() => {}, 1000);\n"), timeout_s=2.0)
    assert out.timed_out and out.result is None and "did not finish within 2 s" in out.problem


# -- the real client, through the loopback proxy, against a mocked engine ------------------------------------------

GREETING = "Hello! How can I help?"


def _json(status: int, doc: object) -> httpx.Response:
    async def body():  # streamed, as an engine's: the proxy forwards the raw stream
        yield json.dumps(doc).encode()

    return httpx.Response(status, content=body(), headers={"content-type": "application/json"})


def _engine(seen: list[httpx.Request]):
    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/chat/completions":
            body = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": f"\n\n{GREETING}"},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11}}  # fmt: skip
            return _json(200, body)
        return _json(404, {"detail": "Not Found"})

    return handler


@pytest.mark.slow
def test_the_real_driver_through_the_proxy(tmp_path):
    _node()
    try:
        env = install_client(SPEC)
    except InstallError as exc:
        unavailable(f"client vercel-ai cannot be installed: {exc}")
    seen: list[httpx.Request] = []

    async def go(feature: str):
        rec = EvidenceRecorder(api_key=KEY)
        upstream = httpx.AsyncClient(base_url="http://127.0.0.1:1", headers={"authorization": f"Bearer {KEY}"},
                                     transport=rec.transport(httpx.MockTransport(_engine(seen))))  # fmt: skip
        async with LoopbackProxy(upstream, f"client.vercel-ai.{feature}") as proxy:
            return await run_driver(env, SPEC.driver, base_url=proxy.base_url, model="m", feature=feature,
                                    timeout_s=60, secrets=[KEY], home=tmp_path)  # fmt: skip

    chat = asyncio.run(go("chat"))
    assert chat.result is not None and chat.result["client"].startswith(f"ai {SPEC.version} (@ai-sdk/openai-compatible")
    assert judge_result("chat", chat.result).status.value == "pass", chat.result
    sent = json.loads(seen[0].content)
    assert sent["model"] == "m" and sent["max_tokens"] == 64 and seen[0].headers["authorization"] == f"Bearer {KEY}"
    gone = asyncio.run(go("messages"))  # the route the mock lacks: the client's own error, the route absent
    assert gone.result is not None and gone.result["error"]["status"] == 404 and seen[-1].url.path == "/v1/messages"
    assert judge_result("messages", gone.result).status.value == "absent"
