"""llama.cpp fixtures: the real llama-server of manifests/llamacpp-0c1e570-cpu.yaml, launched once per session through
harness.launch (tests/conftest.py's engine factory), with an API key so the auth cases run.

The key variant is the committed manifest plus `server.api_key_env: HARNESS_LLAMACPP_TEST_KEY`, written to a session
directory: a file of its own, so the engine factory never hands it out for the plain manifest (or the reverse), and a
variable of its own, so the vLLM fixtures' HARNESS_TEST_API_KEY cannot change the key this engine is asked with. The
first session on a machine builds llama-server (about 6 minutes on 2 cores) into $HARNESS_HOME/builds/<key>; later
sessions verify it (0.2 s to ready). When the engine cannot be had the tests fail under CI=true, skip elsewhere
(tests.conftest.unavailable), never skip in CI.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from harness.manifest import load_manifest
from harness.settings import REPO_ROOT

LLAMACPP_MANIFEST = REPO_ROOT / "manifests" / "llamacpp-0c1e570-cpu.yaml"
EXPECT = "llamacpp-0c1e570"
COMMIT = "0c1e570"
KEY_ENV = "HARNESS_LLAMACPP_TEST_KEY"
API_KEY = "k7f3e9a2-b6d1-4c8f-test"  # a test value; nothing derived from it is ever printed (random-looking, so
# its 6-character ends match no word of a report: the report scrubs those too)


def manifest_variant(directory: Path, name: str = "llamacpp-variant.yaml", **changes) -> Path:
    """The committed llama.cpp manifest with `changes` (dotted keys joined by `__`: engine__version="deadbee"),
    written to `directory`."""
    data = yaml.safe_load(LLAMACPP_MANIFEST.read_text())
    # its one relative path (the sdist's hashed build lock) made absolute, so the copy means the same
    src = data["runtime"]["source"]
    src["build_lock"] = str(LLAMACPP_MANIFEST.parent / src["build_lock"])
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = value
    p = directory / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


@pytest.fixture(scope="session")
def llamacpp_key(tmp_path_factory):
    """(path of the API-key variant of the manifest, the key); the key's variable is set for the session."""
    old = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = API_KEY
    path = manifest_variant(tmp_path_factory.mktemp("llamacpp-keyed"), "llamacpp-keyed.yaml",
                            server__api_key_env=KEY_ENV)  # fmt: skip
    yield path, API_KEY
    if old is None:
        os.environ.pop(KEY_ENV, None)
    else:
        os.environ[KEY_ENV] = old


@pytest.fixture(scope="session")
def llamacpp_engine(engine_factory, llamacpp_key):
    """llama-server 0c1e570 with the tiny GGUF and an API key, started (and verified) once per session."""
    path, _ = llamacpp_key
    return engine_factory(manifest=load_manifest(path))
