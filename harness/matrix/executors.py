"""Where a matrix's cells run: `--executor ray` sends each planned cell to a Ray cluster as one task.

The driver (harness.matrix.run.run_matrix) plans every cell (lock, key, reuse) and alone writes DIR. A Ray task gets
the spec's path, the release, the lock's text and the key; on its node it renders the manifest into a scratch
directory under that node's HARNESS_HOME, builds or verifies the engine environment there, runs the cell
(harness.matrix.cell.run_cell) and returns the cell and its golden recording as data; the scratch is removed. The
driver then writes DIR/cells/<release>.json and DIR/golden/<release>/ as a local run would, and the golden diffs and
pages follow as for a local run. A node that dies, a task that fails or outlives its bound is a failed cell (stage
"executor", the reason), never a crash of the matrix. The driver interrupted (Ctrl-C, SIGTERM) cancels its tasks with
force: Ray kills their workers, and each engine's watchdog (harness.launch.watchdog) kills the engine when its
harness process dies.

Ray is an optional extra (`pip install 'harness[ray]'`). The cluster address must be on loopback (harness.net): on a
cluster, the driver runs on the head node (`ray job submit`, or a KubeRay head pod), where the address is
127.0.0.1:6379.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.errors import DataError, HarnessError, RefusedError, UsageError
from harness.matrix.cell import CELL_FORMAT, CellKey, check_cell_shape, failed_cell, write_cell
from harness.matrix.run import CellJob, record_lock
from harness.matrix.spec import MatrixSpec
from harness.shown import shown

__all__ = ["RayExecutor", "run_on_node", "store_result", "GOLDEN_MAX_BYTES", "ray_options"]

GOLDEN_MAX_BYTES = 64 << 20  # a cell's golden recording is a few hundred KiB; this bounds what a node may send back
# how long past its startup timeout a cell may run on a node before the driver cancels it (install, golden, suite)
CELL_BUDGET_S = 3600.0
# --ray-address: its GCS port must answer as a gRPC server within PROBE_S, and ray.init must have joined within
# JOIN_S; Ray's own connect retries for over 10 minutes where nothing runs Ray
PROBE_S = 5.0
JOIN_S = 30.0


def ray_options(spec: MatrixSpec, release: str) -> dict[str, Any]:
    """The task options a release's cell asks for (the spec's `resources`)."""
    res = spec.setting(release, "resources")
    return {"num_cpus": res.CPU, "num_gpus": res.GPU, "resources": dict(res.custom)}


def _read_tree(root: Path) -> dict[str, bytes]:
    """{relative path: bytes} of the regular files under `root` (symlinks are not followed), bounded in total."""
    files: dict[str, bytes] = {}
    total = 0
    if not root.is_dir():
        return files
    for p in sorted(root.rglob("*")):
        if p.is_symlink() or not p.is_file():
            continue
        total += p.stat().st_size
        if total > GOLDEN_MAX_BYTES:
            raise DataError(f"{root}: the golden recording exceeds {GOLDEN_MAX_BYTES >> 20} MiB")
        files[p.relative_to(root).as_posix()] = p.read_bytes()
    return files


def _node() -> dict[str, Any]:
    import ray

    ctx = ray.get_runtime_context()
    return {"executor": "ray", "node_id": ctx.get_node_id(), "node_ip": ray.util.get_node_ip_address()}


def run_on_node(
    spec_path: str,
    release: str,
    lock_name: str,
    lock_text: str,
    key: CellKey,
    lock_seconds: float | None,
    prompt_sets: list[str] | None,
) -> dict[str, Any]:
    """The body of a Ray task (runs on the node): {"cell": cell, "golden": {path: bytes}}. Never raises for the
    cell: what goes wrong is a failed cell."""
    from harness.matrix.cell import run_cell
    from harness.matrix.spec import load_spec, render_manifest
    from harness.settings import harness_home

    where = _node()
    root = harness_home() / "matrix-work"
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"cell-{release}-", dir=root))
    golden: dict[str, bytes] = {}
    try:
        lock = scratch / "locks" / lock_name
        lock.parent.mkdir()
        lock.write_text(lock_text)
        if hashlib.sha256(lock.read_bytes()).hexdigest() != key.get("lock_sha256"):
            raise DataError(f"{lock_name}: the lock the node received does not match the cell's key")
        spec = load_spec(spec_path, out=scratch)
        manifest = render_manifest(spec, release, lock, str(key["lock_sha256"]), scratch / "manifests")
        cell = run_cell(
            release,
            manifest,
            key,
            scratch,
            expectations=spec.expectations,
            baseline=spec.baseline,
            prompt_sets=prompt_sets,
            lock_seconds=lock_seconds,
            perf=spec.perf,
            scripted=spec.scripted,
            say=lambda m: print(m, flush=True),  # the node's worker log
        )
        golden = _read_tree(scratch / "golden" / release)
    except HarnessError as exc:
        cell = failed_cell(release, key, "manifest", exc.one_line(), str(exc))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    cell["ran_on"] = where
    return {"cell": cell, "golden": golden}


def store_result(out: Path, cell: dict[str, Any], golden: dict[str, bytes]) -> None:
    """Write a cell returned by a node, and its recording, into DIR (the driver's side; paths checked)."""
    release = str(cell["release"])
    target = Path(out) / "golden" / release
    if target.is_symlink():
        raise RefusedError(f"{target}: a symlink in the matrix's golden/; refusing to write through it")
    if target.exists():
        shutil.rmtree(target)  # a recording of an earlier run of this cell is not this run's
    for rel, data in golden.items():
        p = (target / rel).resolve()
        if not p.is_relative_to(target.resolve()) or rel.startswith("/"):
            raise DataError(f"golden file {rel[:80]!r} from the node lies outside golden/{release}")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    write_cell(out, cell)


def _short_of(opts: dict[str, Any], total: dict[str, float]) -> str | None:
    """The first resource a cell asks more of than the whole cluster has, as "NAME AMOUNT", or None."""
    asked = {"CPU": opts["num_cpus"], "GPU": opts["num_gpus"], **opts["resources"]}
    for name, amount in asked.items():
        if amount and total.get(name, 0) < amount:
            return f"{name} {amount:g}"
    return None


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM as Ctrl-C while tasks are out, so the driver cancels them before it goes."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _gcs_address(address: str, what: str) -> tuple[str, int]:
    """(host, port) of a Ray GCS named HOST:PORT, on loopback by harness.net's one rule; `localhost` is handed on as
    127.0.0.1, so no name is ever resolved."""
    from harness.net import loopback_host_port

    if address.startswith("ray://"):
        raise UsageError(f"{what}: give HOST:PORT of the cluster's GCS (Ray Client ray:// is not used)")
    host, port = loopback_host_port(address, what=what)
    return ("127.0.0.1" if host.lower() == "localhost" else host), port


# the client's HTTP/2 connection preface and an empty SETTINGS frame: a gRPC server (Ray's GCS is one) answers with
# a SETTINGS frame of its own
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")


def _gcs_silence(host: str, port: int, seconds: float) -> str | None:
    """None when a gRPC server answers at (host, port), a parsed loopback address, within `seconds`; else what
    happened instead. One connection, bounded in time and in the 9 bytes it reads."""
    deadline = time.monotonic() + seconds
    head = b""
    try:
        with socket.create_connection((host, port), timeout=seconds) as sock:
            sock.sendall(_H2_HELLO)
            while len(head) < 9:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    return "it closed the connection without an answer"
                head += chunk
    except TimeoutError:
        return f"no answer within {seconds:g} s"
    except OSError as exc:
        return f"cannot connect: {exc.strerror or exc}"
    if head[3] != 0x04:  # an HTTP/2 frame header: length (3 bytes), type (4 is SETTINGS), flags, stream
        return "what answers there is not a gRPC server"
    return None


def _within(seconds: float, call: Callable[[], object]) -> bool:
    """Run `call` on a thread of its own and wait at most `seconds`: True when it returned (what it raised is raised
    here), False when it still runs (a daemon thread: it cannot keep the process alive, and SIGTERM stops it)."""
    raised: list[BaseException] = []

    def body() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            raised.append(exc)

    worker = threading.Thread(target=body, name="harness-ray-join", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        return False
    if raised:
        raise raised[0]
    return True


def _no_thread_note(record: logging.LogRecord) -> bool:
    # ray.init off the main thread says it set no SIGTERM handler: the driver sets its own while cells are out
    # (_sigterm_interrupts); before that, SIGTERM ends the driver at once and Ray ends a gone driver's tasks
    return "SIGTERM handler is not set" not in record.getMessage()


class RayExecutor:
    """Each planned cell is one Ray task with the resources the spec asks for; results come back to the driver."""

    def __init__(self, address: str | None = None, *, max_retries: int = 1, poll_s: float = 10.0) -> None:
        self.gcs = _gcs_address(address, "--ray-address") if address is not None else None
        host, port = self.gcs or ("", 0)
        self.address = None if self.gcs is None else (f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        # Without --ray-address a new Ray of this run alone starts (address="local": Ray reads neither RAY_ADDRESS
        # nor its address file). A RAY_ADDRESS off loopback is refused all the same: whoever set it meant a cluster
        # this driver must not join; one on loopback is said and not joined.
        self.unjoined_env = None if address is not None else (os.environ.get("RAY_ADDRESS") or None)
        if self.unjoined_env is not None:
            try:
                _gcs_address(self.unjoined_env, "RAY_ADDRESS")
            except (RefusedError, UsageError) as exc:
                hint = "unset it for a Ray of this run alone, or join a cluster on loopback with --ray-address"
                raise type(exc)(f"{exc}; {hint}") from None
        self.max_retries = max_retries
        self.poll_s = poll_s

    def _connect(self, say: Callable[[str], None]) -> Any:
        # Ray on one machine takes the loopback address for its nodes only when it believes it is not a cluster
        # member; a cluster bound to 127.0.0.1 is reached that way (read when ray is first imported)
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install 'harness[ray]'") from None
        kw: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
        if self.gcs is None:
            if self.unjoined_env is not None:
                say(shown(f"RAY_ADDRESS={self.unjoined_env} is not joined: without --ray-address this run starts a "
                          "Ray of its own"))  # fmt: skip
            try:
                ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1", **kw)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise RefusedError(f"cannot start a local Ray instance: {exc}") from None
            return ray
        # Ray's own connect to a port where no GCS answers retries for over 10 minutes and holds off SIGTERM: a
        # probe first, then ray.init on a thread of its own with a deadline
        silence = _gcs_silence(*self.gcs, PROBE_S)
        if silence is not None:
            raise RefusedError(f"--ray-address {self.address}: no Ray cluster answers there ({silence})")
        worker_log = logging.getLogger("ray._private.worker")
        worker_log.addFilter(_no_thread_note)
        try:
            joined = _within(JOIN_S, lambda: ray.init(address=self.address, **kw))
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RefusedError(f"--ray-address {self.address}: cannot join the Ray cluster: {exc}") from None
        finally:
            worker_log.removeFilter(_no_thread_note)
        if not joined:
            raise RefusedError(f"--ray-address {self.address}: the Ray cluster did not take this driver within "
                               f"{JOIN_S:g} s")  # fmt: skip
        return ray

    def run(
        self,
        spec: MatrixSpec,
        jobs: list[CellJob],
        out: Path,
        *,
        prompt_sets: list[str] | None,
        say: Callable[[str], None],
    ) -> None:
        ray = self._connect(say)
        pending: dict[Any, tuple[CellJob, float]] = {}
        try:
            task = ray.remote(run_on_node)
            total = ray.cluster_resources()
            for job in jobs:
                opts = ray_options(spec, job.release)
                short = _short_of(opts, total)
                if short:  # an autoscaling cluster may still add such a node: said, not refused
                    say(f"[{job.release}] no node of the cluster has {short} now; the cell waits for one")
                ref = task.options(
                    name=f"harness-cell-{job.release}", max_retries=self.max_retries, retry_exceptions=False, **opts
                ).remote(
                    str(spec.path),
                    job.release,
                    job.lock.name,
                    job.lock.read_text(),
                    job.key,
                    job.lock_seconds,
                    prompt_sets,
                )
                pending[ref] = (job, time.monotonic())
                say(f"[{job.release}] sent to Ray (CPU {opts['num_cpus']:g}, GPU {opts['num_gpus']:g}"
                    + "".join(f", {k} {v:g}" for k, v in opts["resources"].items()) + ")")  # fmt: skip
            with _sigterm_interrupts():
                self._collect(ray, spec, pending, out, say)
        except BaseException:
            for ref in pending:  # the workers are killed; their engines die with them (watchdog)
                ray.cancel(ref, force=True, recursive=True)
            raise
        finally:
            ray.shutdown()

    def _collect(
        self,
        ray: Any,
        spec: MatrixSpec,
        pending: dict[Any, tuple[CellJob, float]],
        out: Path,
        say: Callable[[str], None],
    ) -> None:
        t0 = time.monotonic()
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=self.poll_s)
            now = time.monotonic()
            for ref in done:
                job, started = pending.pop(ref)
                cell, golden = self._result(ray, ref, job)
                if cell.get("status") == "ran":  # what the driver knows of the lock: as the local executor says
                    cell = record_lock(spec, job, out, cell)
                store_result(out, cell, golden)
                where = (cell.get("ran_on") or {}).get("node_id") or "?"
                state = "ran" if cell.get("status") == "ran" else f"failed at {cell.get('stage')}: {cell.get('reason')}"
                # the reason and the node id come from the node: shown escaped
                say(shown(f"[{job.release}] {state} on node {str(where)[:12]} in {now - started:.0f} s"))
            for ref, (job, started) in list(pending.items()):
                bound = float(spec.setting(job.release, "startup_timeout_s")) + CELL_BUDGET_S
                if now - started > bound:
                    ray.cancel(ref, force=True)
                    del pending[ref]
                    reason = f"ray: no result within {bound:.0f} s (cancelled; no node with the resources it asks?)"
                    store_result(
                        out, failed_cell(job.release, job.key, "executor", reason, ran_on={"executor": "ray"}), {}
                    )
                    say(f"[{job.release}] {reason}")
            if pending and not done:
                say(f"waiting for {len(pending)} cell(s) on Ray ({now - t0:.0f} s)")

    @staticmethod
    def _result(ray: Any, ref: Any, job: CellJob) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The node's cell and recording; a task Ray could not finish (its node died, its worker was killed, it
        raised) is a failed cell naming Ray's reason."""
        try:
            res = ray.get(ref)
        except ray.exceptions.RayError as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            reason = f"ray: {type(exc).__name__}: {first}"
            return failed_cell(job.release, job.key, "executor", reason, ran_on={"executor": "ray"}), {}
        cell, golden = (
            res.get("cell") if isinstance(res, dict) else None,
            res.get("golden") if isinstance(res, dict) else None,
        )
        where = f"the cell of {job.release} from its Ray node"
        if not isinstance(cell, dict) or cell.get("format") != CELL_FORMAT or cell.get("release") != job.release:
            raise DataError(f"{where}: not a matrix cell for release {job.release}")
        check_cell_shape(cell, where)
        if not isinstance(golden, dict) or not all(
            isinstance(k, str) and isinstance(v, bytes) for k, v in golden.items()
        ):
            raise DataError(f"{where}: the golden recording is not a mapping of paths to bytes")
        return cell, golden
