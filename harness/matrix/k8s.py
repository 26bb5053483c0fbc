"""`harness matrix SPEC --emit k8s-job`: the matrix as a Kubernetes Indexed Job, one completion index per cell.

Index N is the N-th selected release in the spec's order; each pod runs
`harness matrix SPEC --cell-index $JOB_COMPLETION_INDEX --out /results` (the cell, its golden recording and a lock
it made; no pages), into its own directory of a results volume (subPathExpr cell-$(JOB_COMPLETION_INDEX)).
`harness matrix SPEC --collect results/cell-* --out DIR` then makes the matrix from them. The pod asks for the most
any selected release asks (`resources`: CPU, GPU as nvidia.com/gpu, custom resources whose name is a Kubernetes
extended resource `domain/name`); a Ray-only custom resource (no `/`) is left out of the pod and named in an
annotation. HARNESS_HOME (the engine environments) is an emptyDir unless a claim is named.

The document is checked by deserialising it into the `kubernetes` client's own models (`harness[k8s]`) and
serialising it back: a field those models do not know, or a value of the wrong type, is refused. No cluster is
contacted.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from harness import __version__
from harness.errors import DataError, UsageError
from harness.manifest import DIGEST
from harness.matrix.spec import MatrixSpec

__all__ = ["job_document", "check_with_k8s_models", "job_yaml", "check_image"]

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# An image reference as the OCI distribution grammar writes it: [HOST[:PORT]/]PATH[:TAG], here with the digest the
# harness pins every image by (a docker manifest's runtime.docker.digest), so every pod runs the same bytes.
_HOST_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PINNED_IMAGE = re.compile(
    rf"(?:{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
    rf"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?@{DIGEST.pattern}",
    re.ASCII,
)


def check_image(image: str) -> str:
    """`image` when it is a reference pinned by digest (NAME[:TAG]@sha256:<64 hex>); UsageError otherwise, so no
    whitespace, control character or YAML syntax reaches the Job, and no pod runs whatever a tag names that day."""
    if len(image) > 512 or not _PINNED_IMAGE.fullmatch(image):
        raise UsageError(
            f"--image: not an image reference pinned by digest, NAME[:TAG]@sha256:<64 hex>: {image[:120]!r}"
        )
    return image


def _max_resources(spec: MatrixSpec, releases: list[str]) -> tuple[dict[str, str], list[str]]:
    cpu = max(spec.setting(v, "resources").CPU for v in releases)
    gpu = max(spec.setting(v, "resources").GPU for v in releases)
    custom: dict[str, float] = {}
    for v in releases:
        for name, amount in spec.setting(v, "resources").custom.items():
            custom[name] = max(custom.get(name, 0), amount)
    limits: dict[str, str] = {"cpu": f"{cpu:g}"} if cpu else {}
    if gpu:
        limits["nvidia.com/gpu"] = str(math.ceil(gpu))  # a pod's GPUs are whole devices
    ray_only = []
    for name, amount in sorted(custom.items()):
        if "/" in name:
            limits[name] = str(math.ceil(amount))
        else:
            ray_only.append(name)
    return limits, ray_only


def job_document(
    spec: MatrixSpec,
    releases: list[str],
    spec_arg: str,
    *,
    image: str,
    name: str | None = None,
    parallelism: int | None = None,
    results_claim: str = "harness-matrix-results",
    home_claim: str | None = None,
    release_arg: str | None = None,
) -> dict[str, Any]:
    """The Job as a plain document (what is written). `spec_arg` is the spec's path inside the image."""
    if not releases:
        raise UsageError("--emit k8s-job: no release selected")
    job_name = name or f"harness-matrix-{spec.name}".lower().replace("_", "-").replace(".", "-")
    # the default name is made from the spec's: a refusal names where it came from, not an option not given
    name_from = "--job-name" if name else f"the spec's name {spec.name[:60]!r} makes the Job's name (give --job-name)"
    for what, value in ((name_from, job_name), ("--results-claim", results_claim), ("--home-claim", home_claim)):
        if value is not None and not _DNS_LABEL.fullmatch(value):
            raise UsageError(
                f"{what}: not a Kubernetes name (lower case letters, digits, '-'; 63 at most): {value[:80]!r}"
            )
    if parallelism is not None and not 1 <= parallelism <= len(releases):
        raise UsageError(f"--parallelism must be 1 to {len(releases)}, got {parallelism}")
    limits, ray_only = _max_resources(spec, releases)
    args = ["matrix", spec_arg, "--cell-index", "$(JOB_COMPLETION_INDEX)", "--out", "/results"]
    if release_arg is not None:
        args += ["--releases", release_arg]  # the same selection, so index N is the same release in every pod
    container: dict[str, Any] = {
        "name": "cell",
        "image": image,
        "command": ["harness"],
        "args": args,
        "env": [
            {"name": "HARNESS_HOME", "value": "/harness-home"},
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
                },
            },
        ],
        "volumeMounts": [
            {"name": "results", "mountPath": "/results", "subPathExpr": "cell-$(JOB_COMPLETION_INDEX)"},
            {"name": "harness-home", "mountPath": "/harness-home"},
        ],
    }
    if limits:
        container["resources"] = {"requests": dict(limits), "limits": dict(limits)}
    home: dict[str, Any] = (
        {"name": "harness-home", "persistentVolumeClaim": {"claimName": home_claim}}
        if home_claim
        else {"name": "harness-home", "emptyDir": {"sizeLimit": "40Gi"}}
    )
    annotations = {
        "harness/spec": spec.name,
        "harness/version": __version__,
        "harness/releases": ",".join(releases),  # completion index N is the N-th of these
    }
    if ray_only:
        annotations["harness/ray-only-resources"] = ",".join(ray_only)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "labels": {"app.kubernetes.io/name": "harness-matrix"},
            "annotations": annotations,
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": len(releases),
            "parallelism": parallelism or len(releases),
            "backoffLimitPerIndex": 1,  # a pod lost with its node is tried once more; a failed cell is a result
            "maxFailedIndexes": len(releases),
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "harness-matrix"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [
                        {"name": "results", "persistentVolumeClaim": {"claimName": results_claim}},
                        home,
                    ],
                },
            },
        },
    }


def check_with_k8s_models(doc: dict[str, Any]) -> Any:
    """The V1Job the kubernetes client's models make of `doc`; DataError when they drop or change any of it."""
    try:
        from kubernetes.client import ApiClient
    except ImportError:
        raise UsageError(
            "--emit k8s-job checks the Job with the Kubernetes client: pip install 'harness[k8s]'"
        ) from None
    client = ApiClient()
    try:
        job = client.deserialize(json.dumps(doc), "V1Job", "application/json")
    except (ValueError, TypeError) as exc:
        raise DataError(f"the emitted Job is not a valid V1Job: {exc}") from None
    back = client.sanitize_for_serialization(job)
    if back != doc:
        raise DataError(f"the emitted Job does not survive the V1Job model: {_first_difference(doc, back)}")
    return job


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else k)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path or '(top level)'}: {str(a)[:80]!r} became {str(b)[:80]!r}"


def job_yaml(doc: dict[str, Any]) -> str:
    import yaml

    head = "# Written by `harness matrix --emit k8s-job`: one completion index per cell (the annotation's releases).\n"
    return head + yaml.safe_dump(doc, sort_keys=False)
