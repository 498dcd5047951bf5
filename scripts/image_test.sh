#!/usr/bin/env bash
# The real image test behind `nox -s docker`: makes sure a Docker engine and a local registry on
# 127.0.0.1 are running (installing docker.io, debootstrap and docker-registry when missing), runs the
# docker-marked tests, and stops whatever it started. Needs root. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
PORT=${TRM_TEST_REGISTRY_PORT:-5000}
TESTS=${TRM_IMAGE_TESTS:-tests/tools/images/test_docker.py}
work=$(mktemp -d)
dockerd_pid=""
registry_pid=""

stop() {
  local pid=$1
  [[ -n $pid ]] || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
  kill -9 "$pid" 2>/dev/null || true
}
cleanup() {
  stop "$registry_pid"
  stop "$dockerd_pid"
  rm -rf "$work"
}
trap cleanup EXIT

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v docker-registry >/dev/null || missing+=(docker-registry)
if ((${#missing[@]})); then
  echo "::: installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

engine_up() { "$PYTHON" -c 'import docker; docker.from_env().ping()' >/dev/null 2>&1; }
if ! engine_up; then
  echo "::: starting dockerd (no bridge network: builds and test containers run with --network none)"
  dockerd --bridge=none --iptables=false --ip-masq=false >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 60); do engine_up && break; sleep 1; done
  engine_up || { tail -20 "$work/dockerd.log"; echo "dockerd did not come up in 60 s" >&2; exit 1; }
fi

registry_up() {
  "$PYTHON" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/v2/', timeout=2)" >/dev/null 2>&1
}
if registry_up; then
  echo "a registry already answers on 127.0.0.1:$PORT; set TRM_TEST_REGISTRY_PORT to a free port" >&2
  exit 1
fi
mkdir -p "$work/registry"
cat >"$work/registry.yml" <<YAML
version: 0.1
storage:
  filesystem:
    rootdirectory: $work/registry
http:
  addr: 127.0.0.1:$PORT
YAML
echo "::: starting docker-registry on 127.0.0.1:$PORT"
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 30); do registry_up && break; sleep 1; done
registry_up || { tail -20 "$work/registry.log"; echo "docker-registry did not come up" >&2; exit 1; }

TRM_TEST_REGISTRY="127.0.0.1:$PORT" "$PYTHON" -m pytest -m docker -v -s -p no:cacheprovider "$TESTS" "$@"
