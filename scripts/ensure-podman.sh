#!/usr/bin/env bash
# ensure-podman.sh: Podman's Docker-compatible API at
# unix:///run/podman/podman.sock, holding the sandbox image, for the tests
# that run pybox against Podman. As root on Debian it installs podman from
# the machine's apt sources,
# starts `podman system service`, and loads the image from Docker (where
# `pybox image build` made it) when Podman lacks it or holds another build.
# Idempotent.
set -euo pipefail

log() { printf 'ensure-podman: %s\n' "$*" >&2; }

sock="${PYBOX_PODMAN_SOCKET:-/run/podman/podman.sock}"
image="${PYBOX_IMAGE:-pybox-sandbox:2}"  # sandbox.DefaultImage

command -v docker >/dev/null 2>&1 || { log "the docker CLI is missing: run scripts/ensure-docker.sh first"; exit 1; }
answers() { docker -H "unix://$sock" version >/dev/null 2>&1; }

if [ "$(id -u)" != 0 ]; then
  if answers; then
    log "Podman answers at unix://$sock (not root: the image is not checked)"
    exit 0
  fi
  log "no Podman service answers at unix://$sock and we are not root: start one with 'sudo podman system service --time=0 unix://$sock'"
  exit 1
fi

if ! command -v podman >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || { log "no podman and no apt-get: install Podman for your system"; exit 1; }
  log "installing podman from the machine's apt sources"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq podman >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq podman >/dev/null; }
fi

if ! answers; then
  mkdir -p "$(dirname "$sock")"
  log "starting 'podman system service' at unix://$sock (log: /var/log/pybox-podman.log)"
  # From the socket's directory: conmon writes a file named "oom" into its
  # working directory when a container is killed for memory.
  (cd "$(dirname "$sock")" && exec nohup podman system service --time=0 "unix://$sock") >/var/log/pybox-podman.log 2>&1 &
  for _ in $(seq 1 60); do
    answers && break
    sleep 0.5
  done
  answers || { log "Podman did not answer within 30 s; see /var/log/pybox-podman.log"; exit 1; }
fi

want="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
have="$(podman image inspect -f '{{.Id}}' "localhost/$image" 2>/dev/null || true)"
if [ -z "$want" ]; then
  log "Docker holds no $image to load into Podman: run scripts/prepare.sh first"
  exit 1
fi
if [ "${want#sha256:}" != "${have#sha256:}" ]; then
  log "loading $image from Docker into Podman (as localhost/$image)"
  docker save "$image" | podman load -q >/dev/null
fi
log "Podman $(podman version --format '{{.Server.Version}}' 2>/dev/null || podman --version) answers at unix://$sock with localhost/$image"
