"""Docker launcher: a pinned image (by digest, never pulled), published on the host's 127.0.0.1 only.

Networking decision: **bridge networking, port published on host 127.0.0.1 only, and the engine told explicitly to
bind `0.0.0.0` inside the container's own network namespace** (the profile's address flag, given `0.0.0.0`).

Why not `--hostname 127.0.0.1`: in bridge mode the published port is forwarded (docker-proxy / iptables DNAT) to the
container's bridge address (172.17.x.y), never to the container's loopback, so an engine bound to the container's
127.0.0.1 is unreachable through the published port. The other working option, `network_mode="host"` with
`--hostname 127.0.0.1`, puts every port the engine opens on the host's network: TGI also binds a Prometheus port (9000)
and a shard master port (29500) and a second instance or any other service on those ports makes it panic, and a
mistake in one argument would expose the engine on every host interface. With bridge networking the only way in from
the host is the one binding `127.0.0.1:<port> -> <container_port>/tcp` that the harness creates (checked in the tests
with `docker inspect` HostIp and `ss -ltn`), the engine's extra ports stay inside its namespace, and the address is
still passed explicitly so TGI never falls back to the `HOSTNAME` variable Docker sets (a container id, which TGI
would warn about and replace with 0.0.0.0 anyway). Containers on the same Docker bridge could reach the engine's
bridge address; the harness starts nothing else there.

Every container carries the labels `harness.managed=1`, `harness.run-id=<run id>` and `harness.engine-id=<uuid>`;
harness.launch.containers finds them for `harness ps` / `harness down --all`.

Dead-man's switch: before creating the container, start() spawns the watchdog (harness.launch.watchdog, action
`containers`) that holds the read end of a pipe whose write end only this process has. When this process dies, even
by `kill -9`, the pipe reaches EOF and the watchdog removes the container(s) labelled with this engine's id. stop()
tells the watchdog to stand down (it writes "stop" into the pipe) and removes the container itself.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from pathlib import Path

from harness.dockerd import connect
from harness.errors import LaunchError, PinMismatch, RefusedError
from harness.launch.base import Engine, LaunchSpec
from harness.launch.containers import LABEL_ENGINE_ID, LABEL_MANAGED, LABEL_RUN_ID
from harness.launch.watchdog import Watchdog

__all__ = ["DockerEngine", "find_pinned_image", "repo_digests", "engine_args"]

MODEL_MOUNT = "/model"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _split_ref(image: str) -> tuple[str, str | None]:
    """'host:5000/repo:tag' -> ('host:5000/repo', 'tag'); a trailing @digest is dropped."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        return repo, tag
    return ref, None


def repo_digests(image_obj) -> list[str]:
    """The image's RepoDigests entries ('repo@sha256:...')."""
    return list(image_obj.attrs.get("RepoDigests") or [])


def find_pinned_image(image: str, digest: str, client=None):
    """The local image for `image` (looked up by tag; never pulled) if its RepoDigests contain `digest`; else refuse.

    RefusedError when no such image is present locally; PinMismatch (showing the pinned digest and what the local tag
    points to) when it is present with other (or no) repo digests.
    """
    import docker.errors

    client = connect(client)
    repo, _tag = _split_ref(image)
    try:
        img = client.images.get(image)
    except docker.errors.ImageNotFound:
        try:  # pulled by digest only (no tag): still the pinned content
            img = client.images.get(f"{repo}@{digest}")
        except (docker.errors.ImageNotFound, docker.errors.APIError):
            raise RefusedError(
                f"image {image} is not present locally (pinned {digest}); the harness never pulls: "
                f"load it first, e.g. `docker pull {repo}@{digest}`"
            ) from None
    found = repo_digests(img)
    if not any(d.split("@", 1)[-1] == digest for d in found):
        actual = (
            ", ".join(d.split("@", 1)[-1] for d in found)
            if found
            else ("no repo digest (a locally built image that was never pushed or pulled)")
        )
        raise PinMismatch("image digest", digest, actual, where=f"{image} -> image {img.id[:19]}")
    return img


def engine_args(spec: LaunchSpec) -> list[str]:
    """Arguments given to the image's entrypoint: model, address and port set explicitly (from the profile), then the
    profile's defaults the manifest does not set, then the manifest's args.

    The args cannot set what the harness sets (harness.launch.session.check_launch_inputs refuses it before a
    container is created), so the order does not decide anything; tests rely on a later `--port` reaching the engine.
    """
    m, p = spec.manifest, spec.profile
    user_args = list(m.server.args) + list(spec.extra_args)
    # bind 0.0.0.0 in the container's own namespace (see the module docstring); published on host 127.0.0.1 only.
    model = MODEL_MOUNT if p.model_format == "safetensors" else f"{MODEL_MOUNT}/{p.model_path(spec.model_dir).name}"
    args = p.server_args(model, m.model.served_name, "0.0.0.0", m.runtime.docker.container_port)
    return args + p.defaults_for(user_args) + user_args


def _environment(spec: LaunchSpec) -> dict[str, str]:
    p = spec.profile
    env = dict(spec.manifest.server.env)
    env.update(spec.extra_env)
    env.update(OFFLINE_ENV)  # the harness's own settings last, so the manifest cannot undo them
    env.update(p.fixed_env)
    env.update(p.container_env)
    key = spec.api_key()
    if key:  # by environment, so it is not on the command line (ps)
        env[p.api_key_env] = key
    return env


def _publish_ip(host: str) -> str:
    """The host address the port is published on: the loopback literal asked for, else 127.0.0.1."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return "127.0.0.1"  # 'localhost': never resolve a name for a bind address
    if not ip.is_loopback:
        raise RefusedError(f"refusing to publish on {host}: only loopback addresses are allowed")
    return str(ip)


def _container_name(run_id: str, engine_id: str) -> str:
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)
    return f"harness-{safe}-{engine_id[:6]}"


class DockerEngine(Engine):
    """Runs the manifest's pinned image with the verified model mounted read-only at /model."""

    def __init__(self, spec: LaunchSpec, client=None):
        super().__init__(spec)
        if spec.manifest.runtime.docker is None:
            raise RefusedError(f"{spec.manifest.name}: not a docker manifest (runtime.docker is missing)")
        self.docker = spec.manifest.runtime.docker
        self.engine_id = uuid.uuid4().hex
        self.name = _container_name(spec.run_id, self.engine_id)
        self._client = client
        self.container = None
        self.image_id: str | None = None
        self._reaper: Watchdog | None = None
        self._log_thread: threading.Thread | None = None
        self._log_ok = False
        self._last_exit: int | None = None
        self._stopped = False

    # -- labels and lookups -------------------------------------------------------------------------------------

    @property
    def labels(self) -> dict[str, str]:
        return {
            LABEL_MANAGED: "1",
            LABEL_RUN_ID: self.spec.run_id,
            LABEL_ENGINE_ID: self.engine_id,
            "harness.engine": f"{self.spec.manifest.engine.kind}-{self.spec.manifest.engine.version}",
            "harness.manifest": str(self.spec.manifest.path or ""),
            "harness.url": self.spec.base_url,
            "harness.pid": str(os.getpid()),
        }

    @property
    def client(self):
        if self._client is None:
            self._client = connect()
        return self._client

    def create_kwargs(self) -> dict:
        """Keyword arguments for `containers.create(image_id, **kwargs)` (no side effects; tested without a daemon)."""
        spec, d = self.spec, self.docker
        kwargs = dict(
            command=engine_args(spec),
            name=self.name,
            detach=True,
            labels=self.labels,
            environment=_environment(spec),
            ports={f"{d.container_port}/tcp": (_publish_ip(spec.host), spec.port)},
            volumes={str(Path(spec.model_dir).resolve()): {"bind": MODEL_MOUNT, "mode": "ro"}},
            network_mode="bridge",
        )
        if d.gpus:  # only when the manifest asks: all GPUs, like `docker run --gpus all`
            import docker.types

            kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        if d.shm_size:
            kwargs["shm_size"] = d.shm_size
        return kwargs

    # -- Engine interface ---------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.container is not None:
            raise LaunchError(f"{self.name} was already started")
        import docker.errors

        spec, d = self.spec, self.docker
        if not Path(spec.model_dir).is_dir():
            raise RefusedError(f"model directory {spec.model_dir} does not exist")
        img = find_pinned_image(d.image, d.digest, self.client)  # refuse before any side effect
        self.image_id = img.id
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        kwargs = self.create_kwargs()
        self._spawn_reaper()
        try:
            # by image id, not by tag: the tag could be re-pointed between the check and the run
            self.container = self.client.containers.create(img.id, **kwargs)
        except docker.errors.APIError as exc:
            self._stop_reaper()
            raise LaunchError(f"docker could not create {self.name}: {exc.explanation or exc}") from None
        try:
            self.container.start()
        except docker.errors.APIError as exc:
            msg = str(exc.explanation or exc)
            self.stop()
            if "already allocated" in msg or "address already in use" in msg:
                raise RefusedError(f"port {spec.host}:{spec.port} is busy: {msg}") from None
            raise LaunchError(f"docker could not start {self.name}: {msg}") from None
        self._start_log_copy()

    def exit_status(self) -> int | None:
        if self.container is None:
            return self._last_exit
        import docker.errors

        try:
            self.container.reload()
        except docker.errors.NotFound:
            return self._last_exit if self._last_exit is not None else -1
        state = self.container.attrs.get("State", {})
        if state.get("Status") in ("created", "running", "restarting", "paused"):
            return None
        self._last_exit = int(state.get("ExitCode", -1))
        return self._last_exit

    def stop(self, timeout: float = 20.0) -> None:
        """Stop (SIGTERM, then SIGKILL after `timeout`), copy the log, remove; idempotent; fine if already gone."""
        import docker.errors

        if self._stopped:
            return
        container = self.container
        if container is not None:
            try:
                container.reload()
                if container.status in ("running", "restarting", "paused"):
                    container.stop(timeout=max(1, int(round(timeout))))
                container.reload()
                self._last_exit = int(container.attrs.get("State", {}).get("ExitCode", -1))
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError:
                pass  # remove(force=True) below kills it
            self._finish_log_copy(container)
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if "already in progress" not in str(exc):
                    raise
        self._stop_reaper()
        self._stopped = True

    def describe(self) -> dict:
        c = self.container
        return {
            "kind": "docker",
            "run_id": self.spec.run_id,
            "container_id": c.id if c is not None else None,
            "name": self.name,
            "image": self.docker.image,
            "image_id": self.image_id,
            "digest": self.docker.digest,
            "url": self.spec.base_url,
            "log": str(self.log_path),
        }

    # -- logs ---------------------------------------------------------------------------------------------------

    def _start_log_copy(self) -> None:
        container, path = self.container, self.log_path

        def copy() -> None:
            try:
                with open(path, "ab") as out:
                    for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                        out.write(chunk)
                        out.flush()
                self._log_ok = True
            except Exception:  # container removed under us, daemon gone: stop() copies what is left
                self._log_ok = False

        self._log_thread = threading.Thread(target=copy, name=f"log-{self.name}", daemon=True)
        self._log_thread.start()

    def _finish_log_copy(self, container) -> None:
        t = self._log_thread
        if t is not None:
            t.join(timeout=5)
        if t is None or t.is_alive() or not self._log_ok:
            try:  # the stream did not finish: write the whole log instead
                data = container.logs(stdout=True, stderr=True)
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                self.log_path.write_bytes(data)
            except Exception:
                pass

    def log_tail(self, lines: int = 40) -> str:
        tail = super().log_tail(lines)
        if tail or self.container is None:
            return tail
        try:
            return self.container.logs(tail=lines).decode(errors="replace")
        except Exception:
            return ""

    # -- dead-man's switch --------------------------------------------------------------------------------------

    def _spawn_reaper(self) -> None:
        self._reaper = Watchdog.spawn(
            ["containers", "--run-id", self.spec.run_id, "--engine-id", self.engine_id],
            log=self.spec.run_dir / "docker-reaper.log",
        )

    def _stop_reaper(self) -> None:
        reaper, self._reaper = self._reaper, None
        if reaper is not None:
            reaper.release(stand_down=True, timeout=10)
