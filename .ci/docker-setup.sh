#!/bin/sh
# Make a Docker daemon (vfs storage) and the local-registry/stand-in tools available; idempotent.
#   - installs Debian's docker.io, docker-registry and busybox-static when missing (needs root + apt)
#   - starts `dockerd --storage-driver=vfs` in the background when nothing answers, and waits (<= 30 s)
# The daemon log goes to ${HARNESS_HOME:-$HOME/.cache/harness}/dockerd.log. The daemon is left running.
set -eu

need=""
command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || need="$need docker.io"
command -v docker-registry >/dev/null 2>&1 || [ -x /usr/bin/docker-registry ] || need="$need docker-registry"
[ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || need="$need busybox-static"
if [ -n "$need" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "docker-setup: need root to install:$need" >&2
        exit 1
    fi
    echo "docker-setup: installing$need"
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    apt-get install -y --no-install-recommends $need >/dev/null 2>&1 || {
        apt-get update >/dev/null
        apt-get install -y --no-install-recommends $need >/dev/null
    }
fi

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if answers; then
    echo "docker-setup: daemon answers ($(docker version --format '{{.Server.Version}}'))"
    exit 0
fi
if [ -n "${DOCKER_HOST:-}" ] && [ "$DOCKER_HOST" != "unix:///var/run/docker.sock" ]; then
    echo "docker-setup: DOCKER_HOST=$DOCKER_HOST does not answer; not starting a daemon there" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "docker-setup: no daemon answers and starting dockerd needs root" >&2
    exit 1
fi
logdir="${HARNESS_HOME:-$HOME/.cache/harness}"
mkdir -p "$logdir"
DOCKERD="$(command -v dockerd || echo /usr/sbin/dockerd)"
echo "docker-setup: starting $DOCKERD --storage-driver=vfs (log: $logdir/dockerd.log)"
# setsid: its own session, so it outlives this script and a Ctrl-C in the calling terminal
setsid "$DOCKERD" --storage-driver=vfs </dev/null >>"$logdir/dockerd.log" 2>&1 &
i=0
while [ $i -lt 60 ]; do
    if answers; then
        echo "docker-setup: daemon answers ($(docker version --format '{{.Server.Version}}'))"
        exit 0
    fi
    sleep 0.5
    i=$((i + 1))
done
echo "docker-setup: dockerd did not answer within 30 s; last log lines:" >&2
tail -n 20 "$logdir/dockerd.log" >&2
exit 1
