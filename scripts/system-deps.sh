#!/usr/bin/env bash
# System packages and services the tests need (Debian, root): Chromium for the HTML report test, `ss` for the
# loopback checks, CMake and g++ for the llama-server source build (the llama.cpp tests build it once into
# $HARNESS_HOME/builds/<key>, ~6 min on 2 cores, then verify it), then .ci/docker-setup.sh (Docker engine, local
# registry, static busybox; starts dockerd).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v ss >/dev/null || need+=(iproute2)
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)  # brings gcc; make is there already (make test runs this script)
# vLLM 0.18.1's CPU worker needs tcmalloc in LD_PRELOAD (matrix/vllm-cpu.yaml); only the full matrix starts it
[ -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 ] || [ "$(uname -m)" != x86_64 ] || need+=(libtcmalloc-minimal4)
if [ ${#need[@]} -gt 0 ]; then
  echo "system-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
sh .ci/docker-setup.sh
echo "system-deps: ok"
