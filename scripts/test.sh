#!/usr/bin/env bash
# test.sh: run every test of pybox against a real Docker engine.
# Installs and starts what the tests need (engine, gVisor, image, Podman's
# Docker-compatible API, a single-node Kubernetes cluster, Prometheus, the TypeScript SDK client, the MCP Inspector CLI and
# mcp-remote), then runs `go test` on every package, one package at a time since
# several tests watch the engine's whole container list. Engine tests fail
# rather than skip here. Prints how many tests ran and how many used the
# real engine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/prepare.sh
if [ "$(id -u)" = 0 ]; then
  # Podman's Docker-compatible API, for TestPodman (which fails without it).
  bash scripts/ensure-podman.sh || echo "test: Podman could not be set up; TestPodman will fail" >&2
  # A real single-node Kubernetes cluster, for TestKubernetes* (the
  # Kubernetes backend); about 10 min the first time on 2 cores, seconds
  # with Go's build cache.
  bash scripts/ensure-kubernetes.sh || echo "test: the Kubernetes cluster could not be set up; TestKubernetes* will fail" >&2
  # Debian's prometheus and promtool, for TestOperations, the metrics'
  # naming check and the alert rules' tests.
  bash scripts/ensure-prometheus.sh || echo "test: prometheus could not be installed; the operations tests will fail" >&2
fi

echo "test: installing the MCP clients of other ecosystems (npm ci: TypeScript SDK, Inspector CLI, mcp-remote)" >&2
npm ci --prefix testdata/interop --no-audit --no-fund --silent >/dev/null

export PYBOX_REQUIRE_ENGINE=1
if [ "$(id -u)" = 0 ]; then
  # The fault tests start a Docker engine of their own, beside the
  # machine's, and stop, freeze and restart it.
  export PYBOX_TEST_ENGINE_CONTROL=1
fi
PYBOX_ENGINE_LOG="$(mktemp)"
export PYBOX_ENGINE_LOG
log="$(mktemp)"
trap 'rm -f "$PYBOX_ENGINE_LOG" "$log"' EXIT

echo "test: go vet" >&2
go vet ./...

echo "test: go test -p 1 -count=1 -v ./..." >&2
set +e
go test -p 1 -count=1 -timeout 30m -v ./... 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

if [ "$status" -eq 0 ]; then
  # The runner's frame parser, fuzzed for a bounded time.
  echo "test: go test -fuzz FuzzFrameParser -fuzztime 20s ./sandbox" >&2
  set +e
  go test -run '^$' -fuzz '^FuzzFrameParser$' -fuzztime 20s ./sandbox 2>&1 | tail -n 3 | tee -a "$log"
  status=${PIPESTATUS[0]}
  set -e
fi

if [ "$status" -eq 0 ]; then
  # The walls, the core calls and the attacks again, with the warm pool on.
  echo "test: the sandbox's core tests and the attack suite with the pool on (PYBOX_TEST_POOL=2)" >&2
  set +e
  PYBOX_TEST_POOL=2 go test -count=1 -timeout 30m -v -run 'TestRun$|TestTraceback|TestTimeout|TestMemory|TestEndless|TestBinary|TestWalls|TestConcurrent|TestNoContainer|TestClose|TestInputFiles|TestOutputFiles|TestHostile|TestJunkOnEveryDescriptor|TestExit137IsNotMemory|TestAttackSuite' ./sandbox 2>&1 | sed 's/^\(\s*--- [A-Z]*: \)/\1pool: /' | tee -a "$log"
  status=${PIPESTATUS[0]}
  set -e
fi

passed=$(grep -cE '^\s*--- PASS' "$log" || true)
failed=$(grep -cE '^\s*--- FAIL' "$log" || true)
skipped=$(grep -cE '^\s*--- SKIP' "$log" || true)
engine=$(sort -u "$PYBOX_ENGINE_LOG" | wc -l)
echo
echo "tests that used the real Docker engine: $engine"
if [ "$skipped" -gt 0 ]; then
  echo "skipped:"; grep -E '^\s*--- SKIP' "$log" || true
fi
echo "$passed passed, $failed failed, $skipped skipped"
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
if [ -n "${CI:-}" ] && [ "$skipped" -gt 0 ]; then
  echo "test: tests were skipped in CI; every test must run here" >&2
  exit 1
fi
if [ "$engine" -eq 0 ]; then
  echo "test: no test used the real engine" >&2
  exit 1
fi
