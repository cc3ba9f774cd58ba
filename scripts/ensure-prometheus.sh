#!/usr/bin/env bash
# ensure-prometheus.sh: make sure Debian's prometheus and promtool are
# installed, for the tests that scrape pybox with a real Prometheus and check
# the alert rules in deploy/. Installs from the machine's own apt sources;
# no service is started (the tests run their own Prometheus on loopback).
# Idempotent.
set -euo pipefail

log() { printf 'ensure-prometheus: %s\n' "$*" >&2; }

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  log "prometheus is installed ($(prometheus --version 2>&1 | head -n 1))"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  log "no prometheus and no way to install it here: install your system's prometheus package"
  exit 1
fi
log "installing prometheus from the machine's apt sources"
export DEBIAN_FRONTEND=noninteractive
# No package's service starts while this installs: a policy-rc.d of our own
# for the time of the install, unless the machine has one.
own_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  own_policy=1
fi
trap '[ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
log "installed ($(prometheus --version 2>&1 | head -n 1))"
