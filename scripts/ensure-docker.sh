#!/usr/bin/env bash
# ensure-docker.sh: make sure a Docker engine answers. When none does and we
# run as root on Debian, install docker.io from the machine's own apt sources
# and start dockerd in the background. Idempotent.
set -euo pipefail

log() { printf 'ensure-docker: %s\n' "$*" >&2; }

if docker info >/dev/null 2>&1; then
  log "engine answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  log "no Docker engine answers and we are not root: start one (e.g. 'sudo systemctl start docker') or set DOCKER_HOST"
  exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || { log "no dockerd and no apt-get: install Docker for your system"; exit 1; }
  log "installing docker.io from the machine's apt sources"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
fi

# A dockerd of ours may exist but be dead: clear a stale pid file.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
  rm -f /var/run/docker.pid
fi

# The engine of the default socket writes /var/run/docker.pid (the tests'
# own engine, beside it, writes another): start one unless it is there.
if ! { [ -f /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; }; then
  log "starting dockerd (log: /var/log/pybox-dockerd.log)"
  nohup dockerd >/var/log/pybox-dockerd.log 2>&1 &
fi

for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    log "engine answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
    exit 0
  fi
  sleep 1
done
log "dockerd did not answer within 60 s; see /var/log/pybox-dockerd.log"
tail -n 20 /var/log/pybox-dockerd.log >&2 || true
exit 1
