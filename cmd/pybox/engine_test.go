package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/pybox/pybox/internal/testenv"
)

// engineAnswers reports whether a Docker engine answers a ping.
func engineAnswers() bool {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return false
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = cli.Ping(ctx)
	return err == nil
}

// startEngine runs the project's own script that starts dockerd.
func startEngine(t *testing.T) {
	t.Helper()
	out, err := exec.Command("bash", "../../scripts/ensure-docker.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("restarting the engine: %v\n%s", err, out)
	}
}

// TestEngineStoppedAndBack stops the real Docker engine under a running
// server, calls, starts the engine again and calls again, without
// restarting the server. It needs to own dockerd, so it runs only where
// PYBOX_TEST_ENGINE_CONTROL is set (scripts/test.sh sets it when it runs
// as root beside a dockerd it can restart).
func TestEngineStoppedAndBack(t *testing.T) {
	if os.Getenv("PYBOX_TEST_ENGINE_CONTROL") == "" {
		t.Skip("stopping the engine needs PYBOX_TEST_ENGINE_CONTROL=1 (set by scripts/test.sh as root)")
	}
	testenv.Engine(t, image())
	p := startProc(t, nil)
	if a := p.runPython(map[string]any{"code": "print(1)"}, 60*time.Second); a.Result.StructuredContent["stdout"] != "1\n" {
		t.Fatalf("before the stop: %v", a.Result.StructuredContent)
	}

	t.Cleanup(func() {
		if !engineAnswers() {
			startEngine(t)
		}
	})
	if out, err := exec.Command("pkill", "-TERM", "-x", "dockerd").CombinedOutput(); err != nil {
		t.Fatalf("stopping dockerd: %v %s", err, out)
	}
	waitFor(t, "dockerd to stop", 60*time.Second, func() bool {
		return !engineAnswers() && exec.Command("pgrep", "-x", "dockerd").Run() != nil
	})

	start := time.Now()
	a := p.runPython(map[string]any{"code": "print(1)"}, 60*time.Second)
	sc := a.Result.StructuredContent
	stderr, _ := sc["stderr"].(string)
	if sc["error"] != "sandbox_unavailable" || !a.Result.IsError || sc["exit_code"] != 1.0 {
		t.Errorf("with the engine stopped: isError %v, %v; want sandbox_unavailable", a.Result.IsError, sc)
	}
	if !strings.Contains(stderr, "did not answer") || !strings.Contains(stderr, "pybox doctor") {
		t.Errorf("stderr %q does not say what to do", stderr)
	}
	t.Logf("answer with the engine stopped came in %v: %s", time.Since(start).Round(time.Millisecond), stderr)

	startEngine(t)
	a = p.runPython(map[string]any{"code": "print(1)"}, 60*time.Second)
	if a.Result.StructuredContent["stdout"] != "1\n" || a.Result.IsError {
		t.Errorf("after the engine came back: %v", a.Result.StructuredContent)
	}
}
