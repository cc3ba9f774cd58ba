#!/usr/bin/env bash
# ensure-gvisor.sh: make the runsc (gVisor) runtime available to the Docker
# engine. Builds a static runsc from the Go module proxy when none is
# installed, registers it in /etc/docker/daemon.json, and makes dockerd
# reload its configuration. Idempotent; needs root.
set -euo pipefail

# The gVisor release pybox is tested with (a Go pseudo-version of gvisor.dev/gvisor).
GVISOR_VERSION="${GVISOR_VERSION:-v0.0.0-20260527191743-a81fd9dd382e}"
RUNSC="${RUNSC:-/usr/local/bin/runsc}"

log() { printf 'ensure-gvisor: %s\n' "$*" >&2; }

# The settings pybox runs gVisor with (measured in README.md, "gVisor"):
#   --oci-seccomp       runsc ignores the container's seccomp profile unless
#                       told to load it: the pinned profile holds under gVisor too
#   --platform=systrap  the fastest platform that works everywhere: kvm needs
#                       /dev/kvm and hung on these (nested) machines; ptrace is
#                       slower per system call. Named, so that a new default in
#                       a later runsc does not change it silently.
# The file-system and network defaults stay: --overlay2=none and
# --network=none were measured and gain nothing pybox can see (the sandbox's
# root is read-only and Docker's "none" network leaves only loopback), and
# --network=none would silently cut a --network that a user asked for.
if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc":{[^}]*--oci-seccomp[^}]*--platform=systrap' && [ -x "$RUNSC" ]; then
  log "runsc is registered ($("$RUNSC" --version 2>/dev/null | head -1))"
  exit 0
fi
[ "$(id -u)" = 0 ] || { log "registering a runtime needs root"; exit 1; }

if ! [ -x "$RUNSC" ]; then
  log "building runsc $GVISOR_VERSION (static, several minutes)"
  tmp="$(mktemp -d)"
  # Built with cgo, runsc is linked dynamically and fails at start.
  CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-buildvcs=false go install "gvisor.dev/gvisor/runsc@$GVISOR_VERSION"
  install -m 755 "$tmp/runsc" "$RUNSC"
  rm -rf "$tmp"
fi
"$RUNSC" --version >/dev/null

mkdir -p /etc/docker
python3 - "$RUNSC" <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
cfg = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        cfg = json.load(f)
cfg.setdefault("runtimes", {})["runsc"] = {"path": sys.argv[1], "runtimeArgs": ["--oci-seccomp", "--platform=systrap"]}
with open(path, "w") as f:
    json.dump(cfg, f, indent=2)
PY

# The engine that answers on the default socket writes its pid here.
if [ -f /var/run/docker.pid ] && pid="$(cat /var/run/docker.pid)" && kill -0 "$pid" 2>/dev/null; then
  log "reloading dockerd ($pid)"
  kill -HUP "$pid"
else
  bash "$(dirname "${BASH_SOURCE[0]}")/ensure-docker.sh"
fi
for _ in $(seq 1 30); do
  if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc":{[^}]*--oci-seccomp[^}]*--platform=systrap'; then
    log "runsc is registered"
    exit 0
  fi
  sleep 1
done
log "dockerd did not pick up runsc; see /etc/docker/daemon.json"
exit 1
