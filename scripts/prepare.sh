#!/usr/bin/env bash
# prepare.sh: everything a first run needs, idempotent. Sourced or run by
# quickstart.sh and test.sh.
#   - a Docker engine that answers (installs docker.io and starts dockerd as root)
#   - gVisor's runsc registered with it, as root (PYBOX_NO_GVISOR=1 skips it)
#   - the pybox binary at bin/pybox
#   - the sandbox image (built from Debian packages when missing)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'prepare: %s\n' "$*" >&2; }

bash scripts/ensure-docker.sh
if [ "${PYBOX_NO_GVISOR:-}" = "" ] && [ "$(id -u)" = 0 ]; then
  bash scripts/ensure-gvisor.sh
fi

log "building bin/pybox"
mkdir -p bin
go build -o bin/pybox ./cmd/pybox

image="${PYBOX_IMAGE:-}"
if ! bin/pybox image check ${image:+--image "$image"} >/dev/null 2>&1 </dev/null; then
  # Missing, out of date or broken: build it, which needs debootstrap.
  if ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
      log "debootstrap is missing and we are not root: install it, or run this as root"
      exit 1
    fi
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  fi
  log "building the sandbox image (about 2 minutes, once)"
  bin/pybox image build ${image:+--image "$image"}
fi
log "ready: $(bin/pybox image check ${image:+--image "$image"} 2>&1 | head -1)"
