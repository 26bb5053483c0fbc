"""Hostile sources of engine code (issue 21: findings 1, 2, 7, and 9's llama.cpp build log): an sdist from a package
index whose sha256 is not the pin never runs, a source pin is only a project name and a file name, an engine's
environment cannot load code from elsewhere (LD_*, PYTHON*, ...), and the build log never writes through a symlink.
Every refusal is one line (exit 2 at the CLI) naming the file and the field."""

from __future__ import annotations

import copy
import hashlib
import http.server
import io
import os
import tarfile
import threading
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.engines import llamacpp_build as sb
from harness.errors import InstallError, ManifestError
from harness.manifest import DEFAULT_MANIFEST
from harness.settings import REPO_ROOT

LLAMACPP = REPO_ROOT / "manifests" / "llamacpp-0c1e570-cpu.yaml"
VLLM = yaml.safe_load(DEFAULT_MANIFEST.read_text())
VLLM_LOCK = DEFAULT_MANIFEST.parent / VLLM["runtime"]["python"]["lock"]
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
FAKE_KEY_INPUTS = {"archive_sha256": "fake", "flags": [], "cc": {"path": "cc"}, "cxx": {"path": "c++"}}


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), lines
    assert "Traceback" not in err
    return lines[0]


def write_manifest(tmp_path: Path, data: dict, name: str = "m.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def vllm_with_env(env: dict[str, str]) -> dict:
    data = copy.deepcopy(VLLM)
    data["runtime"]["python"]["lock"] = str(VLLM_LOCK)
    data["server"]["env"] = {**data["server"].get("env", {}), **env}
    return data


def llamacpp_with(section: str, **fields) -> dict:
    data = yaml.safe_load(LLAMACPP.read_text())
    data["runtime"]["source"]["build_lock"] = str(LLAMACPP.parent / data["runtime"]["source"]["build_lock"])
    node = data["runtime"]["source"] if section == "source" else data.setdefault("server", {}).setdefault("env", {})
    node.update(fields)
    return data


@pytest.fixture
def nothing_is_built(monkeypatch):
    def got_past(*a, **k):
        raise AssertionError("validation went on to build, fetch or resolve something")

    monkeypatch.setattr("harness.engines.llamacpp_build.ensure_llama_server", got_past)
    monkeypatch.setattr("harness.models.resolve_model", got_past)


# ------------------------------------------------------------------- finding 1: the sdist runs before its hash check


def _sdist(top: str, files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def backend_sdist(marker: Path) -> bytes:
    """evilpkg 1.0 whose in-tree PEP 517 backend (no build requirements) writes `marker` when pip imports it, and
    answers pip's metadata hook properly, so pip would go on without complaint."""
    backend = f"""
import os
open({str(marker)!r}, "w").write("the archive's code ran")

def get_requires_for_build_wheel(config_settings=None):
    return []

def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, "evilpkg-1.0.dist-info")
    os.makedirs(d)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\\nName: evilpkg\\nVersion: 1.0\\n")
    return "evilpkg-1.0.dist-info"

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("not built")
"""
    return _sdist("evilpkg-1.0", {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        "backend.py": backend,
        "PKG-INFO": "Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n",
    })  # fmt: skip


@pytest.fixture
def fake_index(monkeypatch):
    """A PEP 503 index on 127.0.0.1 serving one sdist (set .archive); pip is pointed at it and nothing else."""

    class Index(http.server.BaseHTTPRequestHandler):
        archive = b""
        requested: list[str] = []

        def do_GET(self):
            Index.requested.append(self.path)
            if self.path.rstrip("/") == "/simple/evilpkg":
                body, kind = b'<html><body><a href="/files/evilpkg-1.0.tar.gz">evilpkg-1.0.tar.gz</a></body></html>', "text/html"  # fmt: skip
            elif self.path == "/files/evilpkg-1.0.tar.gz":
                body, kind = Index.archive, "application/octet-stream"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(name)  # e.g. PIP_FIND_LINKS: pip consults nothing but the fake index
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple/")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    try:
        yield Index
    finally:
        server.shutdown()
        server.server_close()


EVIL_PIN = sb.SourcePin("evilpkg", "1.0", "evilpkg-1.0.tar.gz", "0" * 64, "vendor/llama.cpp", "abc1234")


def test_finding_1_an_sdist_that_is_not_the_pinned_one_never_runs(tmp_path, monkeypatch, fake_index):
    """Finding 1: pip prepared the sdist's metadata (running its build backend) before the harness compared the
    sha256; now pip compares it first (--require-hashes) and the backend never runs."""
    marker = tmp_path / "ran.txt"
    fake_index.archive = backend_sdist(marker)
    served = hashlib.sha256(fake_index.archive).hexdigest()
    pinned = "1" * 64
    monkeypatch.setattr(sb, "build_key_inputs", lambda sha, commit: {**FAKE_KEY_INPUTS, "archive_sha256": sha})
    home = tmp_path / "home"
    with pytest.raises(InstallError) as e:
        sb.ensure_llama_server(pinned, pin=EVIL_PIN, home=home, progress=lambda s: None)
    assert not marker.exists(), "the archive's build backend ran before its sha256 was checked"
    msg = str(e.value)
    assert "\n" not in msg and "sha256 mismatch" in msg and pinned in msg and served in msg, msg
    assert not list((home / "downloads").rglob("*.tar.gz"))  # nothing kept
    assert not (home / "builds").exists() or not [p for p in (home / "builds").iterdir() if p.is_dir()]


def test_finding_1_the_pinned_sdist_is_still_fetched(tmp_path, fake_index):
    """The pinned archive itself is fetched into downloads/<sha256>/ as before."""
    fake_index.archive = backend_sdist(tmp_path / "ran.txt")
    sha = hashlib.sha256(fake_index.archive).hexdigest()
    path = sb.fetch_archive(sha, EVIL_PIN, home=tmp_path / "home", progress=lambda s: None)
    assert path == tmp_path / "home" / "downloads" / sha / "evilpkg-1.0.tar.gz"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha


def test_finding_1_the_pinned_sdists_build_backend_is_never_taken_from_the_index(tmp_path, fake_index):
    """Finding 1, its other half: with the hash right, pip prepared the sdist's metadata in an isolated build
    environment, installing the backend the archive names from the index, unhashed (any index could serve code for
    it). Now pip prepares it --no-build-isolation with the pin's hashed build lock's packages (or the harness's own
    Python): the index is never asked for the backend, and an archive whose backend is not there is refused."""
    marker = tmp_path / "ran.txt"
    fake_index.archive = _sdist("evilpkg-1.0", {
        "pyproject.toml": '[build-system]\nrequires = ["evilbackend"]\nbuild-backend = "evilbackend"\n',
        "PKG-INFO": "Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n",
    })  # fmt: skip
    sha = hashlib.sha256(fake_index.archive).hexdigest()
    with pytest.raises(InstallError) as e:
        sb.fetch_archive(sha, EVIL_PIN, home=tmp_path / "home", progress=lambda s: None)
    assert not [p for p in fake_index.requested if "evilbackend" in p], fake_index.requested
    assert "\n" not in str(e.value) and not marker.exists()
    assert not list((tmp_path / "home" / "downloads").rglob("*.tar.gz"))


def test_finding_1_the_llamacpp_manifest_pins_its_build_backend():
    """The llama.cpp manifest names a hashed lock of its sdist's build backend, and validate reads it as a lock."""
    from harness.manifest import load_manifest

    m = load_manifest(LLAMACPP)
    assert m.source_build_lock is not None and m.source_build_lock.is_file()
    text = m.source_build_lock.read_text()
    assert "scikit-build-core==" in text and "--hash=sha256:" in text


# --------------------------------------------------------- finding 2: runtime.source.package is a URL or pip option

SOURCE_CASES = [
    ("package direct URL", {"package": "llama-cpp-python @ http://10.0.0.1/x.tar.gz#"}, "runtime.source.package"),
    ("package -r", {"package": "-rreqs.txt"}, "runtime.source.package"),
    ("package --index-url", {"package": "--index-url=http://10.0.0.1/simple"}, "runtime.source.package"),
    ("package -e", {"package": "-e."}, "runtime.source.package"),
    ("package marker", {"package": "llama-cpp-python; python_version>'3'"}, "runtime.source.package"),
    ("package extra", {"package": "llama-cpp-python[server]"}, "runtime.source.package"),
    ("package space", {"package": "llama cpp"}, "runtime.source.package"),
    ("package path", {"package": "./llama-cpp-python"}, "runtime.source.package"),
    ("package empty", {"package": ""}, "runtime.source.package"),
    ("filename directory", {"filename": "dir/llama_cpp_python-0.3.36.tar.gz"}, "runtime.source.filename"),
    ("filename option", {"filename": "-rreqs.tar.gz"}, "runtime.source.filename"),
    ("filename a wheel", {"filename": "llama_cpp_python-0.3.36-py3-none-any.whl"}, "runtime.source.filename"),
    ("filename no extension", {"filename": "llama_cpp_python"}, "runtime.source.filename"),
    ("filename space", {"filename": "llama cpp.tar.gz"}, "runtime.source.filename"),
    ("version range", {"version": ">=0.3"}, "runtime.source.version"),
]


@pytest.mark.parametrize("fields, field", [c[1:] for c in SOURCE_CASES], ids=[c[0] for c in SOURCE_CASES])
def test_finding_2_a_source_pin_is_a_project_name_and_a_file_name(tmp_path, capsys, nothing_is_built, fields, field):
    """Finding 2: a package that pip reads as a URL or an option (or a file name with a directory) validated."""
    path = write_manifest(tmp_path, llamacpp_with("source", **fields))
    rc = main(["validate", str(path)])
    out, err = capsys.readouterr()
    line = one_error_line(err)
    assert rc == 2 and out == "", err
    assert line.startswith(f"harness: error: {path}: {field}: "), line


@pytest.mark.parametrize("change", [{"package": "-rreqs.txt"}, {"package": "x @ http://10.0.0.1/x.tar.gz"},
                                    {"filename": "../x.tar.gz"}, {"version": "1.0 --index-url=http://10.0.0.1"}])  # fmt: skip
def test_finding_2_the_fetch_refuses_such_a_pin_without_running_pip(tmp_path, monkeypatch, change):
    """Finding 2 (behind the manifest): a SourcePin built elsewhere is checked again before pip sees it."""

    def no_pip(*a, **k):
        raise AssertionError(f"pip ran with {a[0] if a else k}")

    monkeypatch.setattr(sb.subprocess, "run", no_pip)
    pin = sb.SourcePin(**{**EVIL_PIN.__dict__, **change})
    with pytest.raises(InstallError) as e:
        sb.fetch_archive("0" * 64, pin, home=tmp_path / "home", progress=lambda s: None)
    assert "refusing to fetch" in str(e.value) and "\n" not in str(e.value)


def test_finding_2_the_committed_source_manifest_still_validates(capsys, nothing_is_built):
    assert main(["validate", str(LLAMACPP)]) == 0, capsys.readouterr().err


# ------------------------------------------------------- finding 7: loader and interpreter variables in server.env

ENV_CASES = [
    ("PYTHONPATH", {"PYTHONPATH": "/tmp/evil"}),
    ("PYTHONHOME", {"PYTHONHOME": "/tmp/evil"}),
    ("PYTHONSTARTUP", {"PYTHONSTARTUP": "/tmp/evil.py"}),
    ("PYTHONUSERBASE", {"PYTHONUSERBASE": "/tmp/evil"}),
    ("PYTHONINSPECT", {"PYTHONINSPECT": "1"}),
    ("PYTHONWARNINGS", {"PYTHONWARNINGS": "error::evil.Warning"}),  # the category's module is imported
    ("LD_LIBRARY_PATH", {"LD_LIBRARY_PATH": "/tmp/evil"}),
    ("LD_AUDIT", {"LD_AUDIT": "/tmp/evil.so"}),
    ("LD_PRELOAD anywhere", {"LD_PRELOAD": "/tmp/evil.so"}),
    ("LD_PRELOAD relative", {"LD_PRELOAD": "evil.so"}),
    ("LD_PRELOAD dotdot", {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/../../../tmp/evil.so"}),
    ("LD_PRELOAD second entry", {"LD_PRELOAD": f"{TCMALLOC} /tmp/evil.so"}),
    ("LD_PRELOAD env_dir text", {"LD_PRELOAD": "{env_dir}/../../evil.so"}),
    ("BASH_ENV", {"BASH_ENV": "/tmp/evil.sh"}),
    ("ENV", {"ENV": "/tmp/evil.sh"}),
    ("PATH", {"PATH": "/tmp/evil:/usr/bin"}),
]


@pytest.fixture
def tcmalloc_is_a_system_file(monkeypatch):
    """dpkg answers for TCMALLOC only (so the tests do not depend on what this machine has installed)."""
    monkeypatch.setattr(
        "harness.launch.argcheck._dpkg_owner",
        lambda path: "libtcmalloc-minimal4:amd64" if path == TCMALLOC else None,
        raising=False,  # absent before the rule existed: the tests then fail on the finding itself
    )


@pytest.mark.parametrize("env", [c[1] for c in ENV_CASES], ids=[c[0] for c in ENV_CASES])
def test_finding_7_server_env_cannot_load_code_from_elsewhere(tmp_path, capsys, nothing_is_built,
                                                              tcmalloc_is_a_system_file, env):  # fmt: skip
    """Finding 7: server.env accepted PYTHONPATH, LD_PRELOAD, LD_LIBRARY_PATH... pointing anywhere."""
    path = write_manifest(tmp_path, vllm_with_env(env))
    rc = main(["validate", str(path)])
    out, err = capsys.readouterr()
    line = one_error_line(err)
    assert rc == 2 and out == "", err
    assert line.startswith(f"harness: error: {path}: server.env: "), line
    assert next(iter(env)) in line, line


@pytest.mark.parametrize("runtime", ["source", "docker"])
def test_finding_7_every_runtime_refuses_them(tmp_path, capsys, nothing_is_built, runtime):
    data = llamacpp_with("env", PYTHONPATH="/tmp/evil")
    if runtime == "docker":
        data = vllm_with_env({"LD_LIBRARY_PATH": "/tmp/evil"})
        data["runtime"] = {"docker": {"image": "example/vllm:1", "digest": "sha256:" + "b" * 64}}
    path = write_manifest(tmp_path, data)
    assert main(["validate", str(path)]) == 2
    assert "server.env: " in one_error_line(capsys.readouterr().err)


def test_finding_7_a_system_library_may_be_preloaded(tmp_path, capsys, nothing_is_built, tcmalloc_is_a_system_file):
    """What 0.18.1 needs from the system (tcmalloc) stays accepted, and the harmless PYTHON* variables too."""
    path = write_manifest(tmp_path, vllm_with_env({"LD_PRELOAD": TCMALLOC, "PYTHONHASHSEED": "0",
                                                   "PYTHONUNBUFFERED": "1"}))  # fmt: skip
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


def _spec(tmp_path: Path, preload: str) -> Path:
    lock = REPO_ROOT / "manifests" / "locks" / "vllm-0.11.0-cpu.txt"
    p = tmp_path / "spec.yaml"
    p.write_text(
        f"format: 1\nname: synth\ntemplate: {REPO_ROOT / 'matrix' / 'vllm-cpu.template.yaml'}\n"
        'manifest_name: "synth-{version}"\nrequirement: "synth=={version}"\nbaseline: 0.11.0\n'
        f"expectations: vllm-0.11\nreleases:\n  - {{version: 0.11.0, lock: {lock}, env: {{LD_PRELOAD: '{preload}'}}}}\n"
    )
    return p


def test_finding_7_a_matrix_release_preloads_only_inside_its_environment(tmp_path, monkeypatch,
                                                                         tcmalloc_is_a_system_file):  # fmt: skip
    """Finding 7 through the matrix: `{env_dir}/../..` left the release's environment once rendered; the spec's own
    entry (a system tcmalloc and the environment's libiomp) still renders."""
    from harness.envs import env_for, lock_sha256
    from harness.matrix.spec import load_spec, render_manifest

    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    lock = REPO_ROOT / "manifests" / "locks" / "vllm-0.11.0-cpu.txt"
    with pytest.raises(ManifestError) as e:  # refused when the spec is read, before any lock or launch
        load_spec(_spec(tmp_path, "{env_dir}/../../../evil.so"))
    assert ".env" in str(e.value) and "LD_PRELOAD" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ManifestError) as e:  # an absolute path passes the spec's form check; its package is asked here
        render_manifest(load_spec(_spec(tmp_path, "/opt/evil.so")), "0.11.0", lock, lock_sha256(lock), tmp_path / "bad")
    assert "server.env" in str(e.value) and "LD_PRELOAD" in str(e.value) and "\n" not in str(e.value)
    good = load_spec(_spec(tmp_path, f"{TCMALLOC}:{{env_dir}}/lib/libiomp5.so"))
    m = render_manifest(good, "0.11.0", lock, lock_sha256(lock), tmp_path / "good")
    assert m.server.env["LD_PRELOAD"] == f"{TCMALLOC}:{env_for(m).path}/lib/libiomp5.so"


def test_finding_7_the_manifest_names_the_environment_as_envs_does(tmp_path, monkeypatch):
    """load_manifest allows preloading from the manifest's own environment, named as harness.envs names it."""
    from harness.envs import env_for
    from harness.manifest import env_dir_name, load_manifest

    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    m = load_manifest(write_manifest(tmp_path, vllm_with_env({})))
    rt = m.runtime.python
    assert rt is not None
    name = env_dir_name(m.engine.kind, m.engine.version, hashlib.sha256(VLLM_LOCK.read_bytes()).hexdigest(), rt.version)
    assert env_for(m).path == tmp_path / "home" / "envs" / name


def test_finding_7_the_rule_for_a_spec_env(tcmalloc_is_a_system_file):
    """The rule matrix/spec.py calls on a release's env (with the {env_dir} placeholder) and the preloaded files."""
    from harness.launch.argcheck import preloaded_files, refused_loader_env

    ok = {"LD_PRELOAD": f"{TCMALLOC}:{{env_dir}}/lib/libiomp5.so", "PYTHONHASHSEED": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert refused_loader_env(ok) is None
    assert preloaded_files(ok) == [TCMALLOC, "{env_dir}/lib/libiomp5.so"]
    for bad in ("{env_dir}/../../x.so", "{env_dir}//lib/x.so", "{env_dir}/./x.so", "{env_dir}", "/tmp/x.so",
                f"{TCMALLOC}:x.so", "/usr/lib/*/libtcmalloc_minimal.so.4"):  # fmt: skip
        problem = refused_loader_env({"LD_PRELOAD": bad})
        assert problem and problem.startswith("LD_PRELOAD: ") and "\n" not in problem, (bad, problem)
    assert refused_loader_env({"LD_PRELOAD": "{env_dir}/lib/x.so"}, env_dirs=()) is not None  # no environment
    assert "PYTHONPATH" in (refused_loader_env({"PYTHONPATH": "{env_dir}/lib"}) or "")


def test_finding_7_dpkg_answers_for_exact_system_files(tmp_path):
    """The real lookup: a file dpkg itself ships is a system file, a file in tmp is not (skipped without dpkg)."""
    import shutil

    from harness.launch import argcheck

    dpkg = shutil.which("dpkg")
    if dpkg is None or not os.path.isfile("/usr/bin/dpkg"):
        pytest.skip("no dpkg on this machine: every LD_PRELOAD entry outside the environment is refused")
    assert argcheck._dpkg_owner("/usr/bin/dpkg")
    stray = tmp_path / "libevil.so"
    stray.write_bytes(b"")
    assert argcheck._dpkg_owner(str(stray)) is None
    assert argcheck._dpkg_owner("/usr/bin/dpk") is None  # a prefix of an owned path is not that path


# ------------------------------------------------------------- finding 9: the build log is opened through a symlink


def test_finding_9_the_build_log_never_writes_through_a_symlink(tmp_path, monkeypatch):
    """Finding 9 (llama.cpp part): builds/<key>.log was opened with mode "w", truncating whatever a symlink there
    pointed to; now the link is replaced by a fresh log and the file it pointed to is left as it was."""
    top = "t/vendor/llama.cpp/"
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"")
    with tarfile.open(archive, "w:gz") as tf:
        for name, data in {top + "CMakeLists.txt": b"", "t/.git/modules/vendor/llama.cpp/HEAD": b"abc1234" * 5 +
                           b"00000\n"}.items():  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    pin = sb.SourcePin("p", "1", "a.tar.gz", sha, "vendor/llama.cpp", "abc1234")
    monkeypatch.setattr(sb, "build_key_inputs", lambda s, commit: {**FAKE_KEY_INPUTS, "archive_sha256": s})
    monkeypatch.setattr(sb, "_check_cpu", lambda: None)

    def failing_step(cmd, log, env, progress, show, what):
        log.write("configure output\n")
        raise InstallError(f"{what} failed (exit 1): fake (log: {log.name})")

    monkeypatch.setattr(sb, "_run_logged", failing_step)
    home = tmp_path / "home"
    key = sb.build_key({**FAKE_KEY_INPUTS, "archive_sha256": sha})
    (home / "builds").mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    log = home / "builds" / f"{key}.log"
    log.symlink_to(victim)
    with pytest.raises(InstallError):
        sb.ensure_llama_server(sha, archive=archive, pin=pin, home=home, progress=lambda s: None)
    assert victim.read_text() == "precious\n"
    assert not log.is_symlink() and "configure output" in log.read_text()


def test_finding_9_a_symlinked_build_lock_is_refused(tmp_path, monkeypatch):
    """The build's lock file is never followed through a symlink either (nor created where one points)."""
    monkeypatch.setattr(sb, "build_key_inputs", lambda s, commit: {**FAKE_KEY_INPUTS, "archive_sha256": s})
    home = tmp_path / "home"
    sha = "a" * 64
    key = sb.build_key({**FAKE_KEY_INPUTS, "archive_sha256": sha})
    (home / "builds").mkdir(parents=True)
    target = tmp_path / "elsewhere.lock"
    (home / "builds" / f"{key}.lock").symlink_to(target)
    with pytest.raises(InstallError) as e:
        sb.ensure_llama_server(sha, archive=tmp_path / "none.tar.gz", pin=EVIL_PIN, home=home, progress=lambda s: None)
    assert "build lock" in str(e.value) and not target.exists()


def test_finding_7_the_callers_own_code_variables_do_not_reach_the_engine(tmp_path, monkeypatch):
    """#7: the engine inherited the harness's environment, so a PYTHONPATH or LD_PRELOAD set around `harness run`
    loaded unverified code into the engine all the same. PATH and LD_LIBRARY_PATH (the host's GPU libraries) stay."""
    from harness.launch.base import LaunchSpec
    from harness.launch.subprocess_engine import engine_environment
    from harness.manifest import DEFAULT_MANIFEST, load_manifest

    for name, value in {"PYTHONPATH": str(tmp_path), "LD_PRELOAD": str(tmp_path / "x.so"), "PYTHONSTARTUP": "s.py",
                        "LD_AUDIT": "a.so", "LD_LIBRARY_PATH": "/usr/lib/gpu"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    m = load_manifest(DEFAULT_MANIFEST)
    spec = LaunchSpec(manifest=m, run_id="t", run_dir=tmp_path, model_dir=tmp_path, port=12345, env_dir=tmp_path)
    env = engine_environment(spec)
    assert not {"PYTHONPATH", "LD_PRELOAD", "PYTHONSTARTUP", "LD_AUDIT"} & set(env)
    assert env["LD_LIBRARY_PATH"] == "/usr/lib/gpu" and env["PATH"]
