package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pybox/pybox/internal/testenv"
)

// TestEngineStoppedAndBack stops a real Docker engine under a running
// server, calls, starts the engine again and calls again, without
// restarting the server. The engine is the test binary's own
// (testenv.Private), stopped and started by the pid it started.
func TestEngineStoppedAndBack(t *testing.T) {
	e := testenv.Private(t, image())
	p := startProc(t, []string{"DOCKER_HOST=" + e.Host})
	if a := p.runPython(map[string]any{"code": "print(1)"}, 60*time.Second); a.Result.StructuredContent["stdout"] != "1\n" {
		t.Fatalf("before the stop: %v", a.Result.StructuredContent)
	}
	t.Cleanup(func() { e.Start() })
	e.Stop()

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

	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	a = p.runPython(map[string]any{"code": "print(1)"}, 60*time.Second)
	if a.Result.StructuredContent["stdout"] != "1\n" || a.Result.IsError {
		t.Errorf("after the engine came back: %v", a.Result.StructuredContent)
	}
}
