#!/usr/bin/env bash
# System packages the tests need (Debian): a Docker engine, a local image registry, a static busybox for the
# stand-in image, and Chromium for the HTML report test. Installs only what is missing; needs root.
set -euo pipefail
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-registry >/dev/null || need+=(docker-registry)
[ -x /bin/busybox ] && /bin/busybox --help 2>&1 | head -1 | grep -q static || dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v chromium >/dev/null || need+=(chromium)
command -v ss >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  echo "system-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "system-deps: ok"
