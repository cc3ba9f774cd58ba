package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/pybox/pybox/internal/testenv"
)

// TestDoctor runs pybox doctor on the good setup and on three broken ones:
// it names the broken part with its fix, and exits non-zero.
func TestDoctor(t *testing.T) {
	testenv.Engine(t, image())
	tests := []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		want     []string
	}{
		{"good setup", nil, nil, 0, []string{"ok   engine", "ok   image", "ok   sandbox", "CapEff 0", "all checks passed"}},
		{"engine stopped", []string{"DOCKER_HOST=unix:///tmp/pybox-no-engine.sock"}, nil, 1, []string{"FAIL engine", "unix:///tmp/pybox-no-engine.sock (from DOCKER_HOST)", "fix: start Docker"}},
		{"image missing", nil, []string{"--image", "pybox-sandbox:missing"}, 1, []string{"FAIL image", "pybox-sandbox:missing is missing", "fix: sudo pybox image build"}},
		{"runtime absent", nil, []string{"--runtime", "runsc-missing"}, 1, []string{"FAIL runtime", `"runsc-missing" wanted`, "fix: register"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(binary, append([]string{"doctor"}, tt.args...)...)
			cmd.Env = append(append(os.Environ(), "PYBOX_IMAGE="+image()), tt.env...)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != tt.wantCode {
				t.Errorf("exit %d; want %d\n%s", code, tt.wantCode, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("doctor's output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
