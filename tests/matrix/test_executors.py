"""The executor layer without an engine: the spec's `resources`, the `harness matrix` modes and their options, the
Kubernetes Indexed Job (checked against the kubernetes client's models), `--collect` (by the reuse rules; two
directories equal one run over both releases), and the driver's side of a Ray result (what a node sends back is
written only inside DIR)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.errors import DataError, ManifestError, RefusedError
from harness.matrix.cell import load_cell
from harness.matrix.spec import load_spec
from tests.matrix.helpers import REPO, write_spec

SPEC = REPO / "matrix" / "vllm-cpu.yaml"
CI_SPEC = REPO / "matrix" / "vllm-cpu-ci.yaml"
RESULTS = REPO / "matrix" / "results"


def test_resources_are_read_per_release_and_default_to_one_cpu(tmp_path):
    p = write_spec(
        tmp_path, ["1.0.0", "1.1.0"], extra="defaults:\n  resources: {CPU: 2, custom: {accelerator_type:A100: 1}}\n"
    )
    text = p.read_text().replace("{version: 1.1.0,", "{version: 1.1.0, resources: {GPU: 1},")
    p.write_text(text)
    spec = load_spec(p)
    assert spec.setting("1.0.0", "resources").CPU == 2
    assert spec.setting("1.0.0", "resources").custom == {"accelerator_type:A100": 1}
    assert spec.setting("1.1.0", "resources").GPU == 1 and spec.setting("1.1.0", "resources").CPU == 1
    assert load_spec(SPEC).setting("0.11.0", "resources").CPU == 1


@pytest.mark.parametrize(
    "resources, field",
    [
        ("{CPU: -1}", "CPU"),
        ("{GPU: 1000}", "GPU"),
        ("{custom: {'bad name': 1}}", "custom"),
        ("{custom: {CPU: 1}}", "custom"),
        ("{custom: {x: 0}}", "custom"),
        ("{cpus: 1}", "cpus"),
    ],
)
def test_bad_resources_are_one_manifest_error_naming_the_field(tmp_path, resources, field):
    p = write_spec(tmp_path, ["1.0.0"], extra=f"defaults:\n  resources: {resources}\n")
    with pytest.raises(ManifestError) as e:
        load_spec(p)
    assert "defaults.resources" in str(e.value) and field in str(e.value)


def test_emit_k8s_job_is_an_indexed_job_the_kubernetes_models_accept(capsys):
    from kubernetes.client import ApiClient

    assert main(["matrix", str(SPEC), "--emit", "k8s-job"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    job = ApiClient().deserialize(json.dumps(doc), "V1Job", "application/json")
    n = len(load_spec(SPEC).versions)
    assert job.kind == "Job" and job.spec.completion_mode == "Indexed" and job.spec.completions == n
    (container,) = job.spec.template.spec.containers
    assert container.args == [
        "matrix", str(SPEC), "--cell-index", "$(JOB_COMPLETION_INDEX)", "--out", "/results"
    ]  # fmt: skip
    assert job.spec.template.spec.restart_policy == "Never"
    assert job.metadata.annotations["harness/releases"].split(",") == load_spec(SPEC).versions
    assert container.resources.requests == {"cpu": "1"}


def test_emit_passes_the_selection_and_the_most_any_release_asks(tmp_path, capsys):
    p = write_spec(tmp_path, ["1.0.0", "1.1.0", "1.2.0"])
    p.write_text(
        p.read_text().replace(
            "{version: 1.1.0,",
            "{version: 1.1.0, resources: {CPU: 4, GPU: 1, custom: {example.com/fpga: 2, accelerator_type:A100: 1}},",
        )
    )
    rc = main(["matrix", str(p), "--emit", "k8s-job", "--releases", "1.0.0..1.1.0", "--image", "reg/harness@sha256:" + "a" * 64,
               "--spec-path", "/app/spec.yaml", "--parallelism", "1"])  # fmt: skip
    assert rc == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    c = doc["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][-2:] == ["--releases", "1.0.0..1.1.0"] and c["args"][1] == "/app/spec.yaml"
    assert doc["spec"]["completions"] == 2 and doc["spec"]["parallelism"] == 1
    assert c["resources"]["limits"] == {"cpu": "4", "nvidia.com/gpu": "1", "example.com/fpga": "2"}
    assert doc["metadata"]["annotations"]["harness/ray-only-resources"] == "accelerator_type:A100"


def test_a_job_the_models_would_change_is_refused():
    from harness.matrix.k8s import check_with_k8s_models, job_document

    doc = job_document(load_spec(SPEC), ["0.11.0"], "matrix/vllm-cpu.yaml", image="harness:x")
    check_with_k8s_models(doc)
    doc["spec"]["completionsMode"] = "Indexed"  # a misspelt field: the models drop it
    with pytest.raises(DataError, match="completionsMode"):
        check_with_k8s_models(doc)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--emit", "k8s-job", "--cell-index", "0"], "do not go together"),
        (["--out", "D", "--collect", "A", "--cell-index", "0"], "do not go together"),
        (["--cell-index", "0"], "--out DIR is required"),
        (["--out", "D", "--image", "x"], "option of --emit"),
        (["--out", "D", "--ray-address", "127.0.0.1:6379"], "option of --executor ray"),
        (["--out", "D", "--executor", "ray", "--cell-index", "0"], "runs a whole matrix"),
        (["--out", "D", "--force"], "option of --collect"),
        (["--out", "D", "--collect", "A", "--releases", "0.11.0"], "--releases is not used"),
        (["--out", "D", "--executor", "ray", "--keep-envs", "1"], "option of the local executor"),
        (["--out", "D", "--cell-index", "99"], "has 24 cell(s)"),
        (["--emit", "k8s-job", "--job-name", "Bad_Name"], "not a Kubernetes name"),
        (["--emit", "k8s-job", "--parallelism", "0"], "--parallelism"),
    ],
)
def test_mode_options_are_refused_with_one_line(tmp_path, capsys, argv, says):
    argv = [str(tmp_path / a) if a in ("D", "A") else a for a in argv]
    assert main(["matrix", str(SPEC), *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("address", ["192.0.2.1:6379", "ray://127.0.0.1:10001", "example.com:6379", "127.0.0.1"])
def test_a_ray_address_off_loopback_is_refused_before_ray_is_reached(address):
    from harness.errors import UsageError
    from harness.matrix.executors import RayExecutor

    with pytest.raises((RefusedError, UsageError)):
        RayExecutor(address)
    assert RayExecutor("127.0.0.1:6379").address == "127.0.0.1:6379"


def test_what_a_node_returns_is_checked_as_a_cell(tmp_path):
    from harness.matrix.executors import RayExecutor
    from harness.matrix.run import CellJob
    from tests.matrix.helpers import cell

    class Ray:  # what ray.get answers: the task's return value
        class exceptions:
            RayError = RuntimeError

        def __init__(self, value):
            self.value = value

        def get(self, ref):
            return self.value

    job = CellJob("1.0.0", {}, tmp_path / "lock.txt", None)
    good = cell("1.0.0")
    assert RayExecutor._result(Ray({"cell": good, "golden": {"a": b"x"}}), None, job) == (good, {"a": b"x"})
    bad_shape = {**good, "observables": {"metrics": []}}
    for value in ({"cell": cell("2.0.0"), "golden": {}}, {"cell": bad_shape, "golden": {}},
                  {"cell": good, "golden": {"a": "text"}}, None):  # fmt: skip
        with pytest.raises(DataError):
            RayExecutor._result(Ray(value), None, job)


def test_a_result_from_a_node_is_written_only_inside_dir(tmp_path):
    from harness.matrix.executors import store_result
    from tests.matrix.helpers import cell

    c = cell("1.0.0")
    store_result(tmp_path, c, {"meta.json": b"{}", "set/a.json": b"[]"})
    assert (tmp_path / "golden" / "1.0.0" / "set" / "a.json").read_bytes() == b"[]"
    assert load_cell(tmp_path, "1.0.0")["release"] == "1.0.0"
    for rel in ("../../escape.json", "/etc/x"):
        with pytest.raises(DataError):
            store_result(tmp_path, c, {rel: b"x"})
    assert not (tmp_path / "escape.json").exists()


def _current(c: dict, release: str) -> dict:
    from tests.matrix.helpers import with_current_key

    return with_current_key(c, release, CI_SPEC)


def _pod_dir(tmp: Path, name: str, release: str, *, lone: bool = True) -> Path:
    """A directory as one `--cell-index` pod leaves it: one committed cell and its recording; `lone`: the golden
    diff refused as it is without the baseline's recording beside it."""
    d = tmp / name
    (d / "cells").mkdir(parents=True)
    c = _current(json.loads((RESULTS / "cells" / f"{release}.json").read_text()), release)
    if lone and release != "0.11.0":
        c["golden_diff"] = {"baseline": "0.11.0", "refused": "no recording of the baseline release in this matrix"}
    (d / "cells" / f"{release}.json").write_text(json.dumps(c))
    shutil.copytree(RESULTS / "golden" / release, d / "golden" / release)
    return d


def test_collect_of_two_directories_equals_one_run_over_both_releases(tmp_path, capsys):
    """The committed cells of 0.11.0 and 0.32.0 are one run over both: collected from two pods' directories they
    are the same cells (golden diff refilled against the baseline) and the same matrix rows."""
    a, b = _pod_dir(tmp_path, "pod-0", "0.11.0"), _pod_dir(tmp_path, "pod-1", "0.32.0")
    out = tmp_path / "merged"
    assert main(["matrix", str(CI_SPEC), "--collect", str(a), str(b), "--out", str(out)]) == 0, capsys.readouterr().err
    assert "collected 2 cell(s) from 2 directories" in capsys.readouterr().out
    one = tmp_path / "one"
    (one / "cells").mkdir(parents=True)
    for v in ("0.11.0", "0.32.0"):
        (one / "cells" / f"{v}.json").write_text(json.dumps(_current(json.loads((RESULTS / "cells" / f"{v}.json")
                                                                                .read_text()), v)))  # fmt: skip
        shutil.copytree(RESULTS / "golden" / v, one / "golden" / v)
        assert load_cell(out, v) == load_cell(one, v), v
    from harness.matrix.render import write_pages

    assert write_pages(load_spec(CI_SPEC), out)["rows"] == write_pages(load_spec(CI_SPEC), one)["rows"]


def test_collect_refuses_two_cells_of_one_release_with_different_keys(tmp_path, capsys):
    a = _pod_dir(tmp_path, "a", "0.11.0")
    b = _pod_dir(tmp_path, "b", "0.11.0")
    c = json.loads((b / "cells" / "0.11.0.json").read_text())
    c["key"]["config_sha256"] = "f" * 64  # made for another config: stale here, left out by the reuse rule
    (b / "cells" / "0.11.0.json").write_text(json.dumps(c))
    out = tmp_path / "out"
    assert main(["matrix", str(CI_SPEC), "--collect", str(a), str(b), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "0.11.0 not taken: config_sha256 changed" in captured.err
    assert load_cell(out, "0.11.0")["key"] == json.loads((a / "cells" / "0.11.0.json").read_text())["key"]


def test_collect_conflict_between_fitting_cells_is_refused_unless_force(tmp_path, monkeypatch, capsys):
    import harness.matrix.collect as collect_mod

    a, b = _pod_dir(tmp_path, "a", "0.11.0"), _pod_dir(tmp_path, "b", "0.11.0")
    c = json.loads((b / "cells" / "0.11.0.json").read_text())
    c["key"]["lock_sha256"] = "e" * 64  # each directory's own lock fits its cell: two machines locked apart
    (b / "cells" / "0.11.0.json").write_text(json.dumps(c))
    real = collect_mod.cell_key

    def key_of_its_own_lock(spec, release, lock, prompt_sets, *, stale):
        k = real(spec, release, lock, prompt_sets, stale=stale)
        return {**k, "lock_sha256": "e" * 64} if "/b/" in str(_current_source[0]) else k

    _current_source = [None]
    real_candidate = collect_mod._candidate

    def candidate(spec, release, source, prompt_sets):
        _current_source[0] = f"{source}/"
        return real_candidate(spec, release, source, prompt_sets)

    monkeypatch.setattr(collect_mod, "cell_key", key_of_its_own_lock)
    monkeypatch.setattr(collect_mod, "_candidate", candidate)
    out = tmp_path / "out"
    assert main(["matrix", str(CI_SPEC), "--collect", str(a), str(b), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "hold cells of different keys (lock_sha256 differ)" in err and len(err.strip().splitlines()) == 1
    assert not (out / "cells" / "0.11.0.json").exists()
    assert main(["matrix", str(CI_SPEC), "--collect", str(a), str(b), "--out", str(out), "--force"]) == 0
    assert load_cell(out, "0.11.0")["key"]["lock_sha256"] != "e" * 64  # the first directory's


def test_collect_refuses_out_among_its_sources_and_a_missing_directory(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert main(["matrix", str(CI_SPEC), "--collect", str(out), "--out", str(out)]) == 2
    assert "is --out itself" in capsys.readouterr().err
    assert main(["matrix", str(CI_SPEC), "--collect", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_run_matrix_with_an_executor_plans_in_the_driver_and_writes_what_it_returns(tmp_path):
    """A fake executor stands for Ray: the driver plans (lock, key) and the executor's cells land in DIR with the
    same keys a local run gives; reused cells are not sent."""
    from harness.matrix.cell import write_cell
    from harness.matrix.run import run_matrix
    from tests.matrix.helpers import cell

    spec = load_spec(write_spec(tmp_path, ["1.0.0", "1.1.0"]))
    sent: list[str] = []

    class Fake:
        def run(self, spec, jobs, out, *, prompt_sets, say):
            for job in jobs:
                sent.append(job.release)
                c = cell(job.release, key=job.key)
                c["ran_on"] = {"executor": "ray", "node_id": "n1", "node_ip": "127.0.0.1"}
                write_cell(out, c)

    out = tmp_path / "m"
    doc = run_matrix(spec, out, spec.versions, executor=Fake(), say=lambda m: None)
    assert sent == ["1.0.0", "1.1.0"] and doc["run"]["actions"] == {"1.0.0": "ran", "1.1.0": "ran"}
    doc = run_matrix(spec, out, spec.versions, executor=Fake(), say=lambda m: None)
    assert sent == ["1.0.0", "1.1.0"] and doc["run"]["actions"] == {"1.0.0": "reused", "1.1.0": "reused"}
    assert load_cell(out, "1.1.0")["ran_on"]["node_id"] == "n1"


def test_collect_refuses_a_symlink_in_a_recording(tmp_path, capsys):
    a = _pod_dir(tmp_path, "a", "0.11.0")
    (a / "golden" / "0.11.0" / "link.json").symlink_to("/etc/hostname")
    out = tmp_path / "out"
    assert main(["matrix", str(CI_SPEC), "--collect", str(a), "--out", str(out)]) == 2
    assert "a symlink in a golden recording" in capsys.readouterr().err
    assert not (out / "golden" / "0.11.0").exists()


def test_a_cell_asking_more_than_the_cluster_has_is_named():
    from harness.matrix.executors import _short_of

    opts = {"num_cpus": 2, "num_gpus": 0, "resources": {"accelerator_type:A100": 1}}
    assert _short_of(opts, {"CPU": 4.0}) == "accelerator_type:A100 1"
    assert _short_of(opts, {"CPU": 1.0, "accelerator_type:A100": 1.0}) == "CPU 2"
    assert _short_of(opts, {"CPU": 2.0, "accelerator_type:A100": 1.0}) is None
