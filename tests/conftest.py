"""Shared fixtures: the real vLLM engine, started once per test session.

Under CI=true a test that cannot get the engine (or Docker) fails; it never skips silently.
"""

from __future__ import annotations

import os

import pytest

from harness.manifest import DEFAULT_MANIFEST, load_manifest

IN_CI = os.environ.get("CI") == "true"

# No test sends traffic outside loopback, not even to show that it is refused: a connect() elsewhere fails the test.
from tests.support import netguard  # noqa: E402

netguard.install()


def unavailable(reason: str):
    """Fail in CI, skip (with the reason shown by -ra) elsewhere."""
    if IN_CI:
        pytest.fail(f"required resource unavailable under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def _warm(engine) -> None:
    """One streamed request with logprobs before any test judges the engine: vLLM compiles its logprobs op on the
    first such request, which on a loaded 2-core machine took longer than the suite's 45 s stream bound (the first
    case to ask, chat.stream, was then judged on a stream cut by the bound). An answer or an error: either is fine."""
    import httpx

    headers = {"Authorization": f"Bearer {engine.api_key}"} if getattr(engine, "api_key", None) else {}
    body = {"model": engine.served_name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
            "temperature": 0, "stream": True, "logprobs": True}  # fmt: skip
    try:
        with httpx.Client(base_url=engine.base_url, headers=headers, timeout=180, trust_env=False) as c:
            with c.stream("POST", "/v1/chat/completions", json=body) as r:
                for _ in r.iter_bytes():
                    pass
    except httpx.HTTPError:
        pass


class _Engines:
    def __init__(self, tmp_factory):
        self.tmp_factory = tmp_factory
        self.running: dict = {}
        self.failed: dict = {}

    def get(self, manifest=None, extra_args=(), extra_env=None, api_key=None):
        from harness.launch.session import prepare, start_verified

        m = manifest if manifest is not None else load_manifest(DEFAULT_MANIFEST)
        if not hasattr(m, "engine"):
            m = load_manifest(m)
        key = (str(m.path), m.file_sha256(), tuple(extra_args), tuple(sorted((extra_env or {}).items())), api_key)
        if key in self.running:
            return self.running[key]
        if key in self.failed:
            unavailable(self.failed[key])
        if api_key is not None:
            os.environ["HARNESS_TEST_API_KEY"] = api_key
            m = m.model_copy(update={"server": m.server.model_copy(update={"api_key_env": "HARNESS_TEST_API_KEY"})})
        try:
            engine = prepare(
                m, extra_args=tuple(extra_args), extra_env=extra_env,
                run_dir=self.tmp_factory.mktemp("engine-run"), quiet=True,
            )  # fmt: skip
            start_verified(engine, quiet=True)
            _warm(engine)
        except Exception as exc:  # noqa: BLE001 - reported as the reason the engine is unavailable
            self.failed[key] = f"engine could not be started: {type(exc).__name__}: {exc}"
            unavailable(self.failed[key])
        self.running[key] = engine
        return engine

    def stop_all(self):
        for engine in self.running.values():
            engine.stop()
        self.running.clear()


@pytest.fixture(scope="session")
def _engines(tmp_path_factory):
    engines = _Engines(tmp_path_factory)
    yield engines
    engines.stop_all()


@pytest.fixture(scope="session")
def vllm_engine(_engines):
    """The default manifest's engine (vLLM 0.11.0, tiny model), started once per session."""
    return _engines.get()


@pytest.fixture(scope="session")
def engine_factory(_engines):
    """engine_factory(extra_args=(), extra_env=None, api_key=None, manifest=None) -> a started engine, cached."""

    def factory(extra_args=(), extra_env=None, api_key=None, manifest=None):
        return _engines.get(manifest=manifest, extra_args=extra_args, extra_env=extra_env, api_key=api_key)

    return factory
