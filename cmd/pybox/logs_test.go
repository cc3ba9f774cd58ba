package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pybox/pybox/internal/testenv"
)

// TestLogsNeverCarrySecrets runs the server at debug level, where code is
// logged, with a secret in its own environment and code that prints it and
// others; then with a missing image, which logs warnings with the engine's
// error. No planted secret reaches the log.
func TestLogsNeverCarrySecrets(t *testing.T) {
	testenv.Engine(t, image())
	const envSecret = "env-planted-Secret-value-93af"
	ghp := "ghp_" + strings.Repeat("Zx9", 12)
	bearer := "Bearer " + strings.Repeat("aB3", 10)
	code := "import sys\nprint('" + envSecret + "')\nprint('" + ghp + "', file=sys.stderr)\nprint('" + bearer + "')\nraise ValueError('" + ghp + "')\n"
	planted := []string{envSecret, ghp[4:16], strings.Repeat("aB3", 10)}

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"debug level", []string{"serve", "--log-level", "debug"}},
		{"image missing", []string{"serve", "--log-level", "debug", "--image", "pybox-sandbox:no-such-image-" + ghp}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProc(t, []string{"PYBOX_TEST_SERVICE_TOKEN=" + envSecret, "PYBOX_LOG_FORMAT=json"}, tc.args...)
			a := p.runPython(map[string]any{"code": code}, 60*time.Second)
			sc := a.Result.StructuredContent
			for _, field := range []string{"stdout", "stderr"} {
				v, _ := sc[field].(string)
				for _, s := range planted {
					if strings.Contains(v, s) {
						t.Errorf("%s carries a planted secret: %q", field, v)
					}
				}
			}
			p.stdin.Close()
			<-p.exited
			logs := p.stderr.String()
			if !strings.Contains(logs, `"level":"debug"`) || !strings.Contains(logs, `"message":"run_python"`) {
				t.Errorf("the log does not have the debug and info lines this test needs:\n%s", logs)
			}
			for _, s := range planted {
				if strings.Contains(logs, s) {
					t.Errorf("the log carries the planted secret %q:\n%s", s, logs)
				}
			}
			if tc.name == "image missing" && !strings.Contains(logs, `"level":"warn"`) {
				t.Errorf("no warn line in the log:\n%s", logs)
			}
		})
	}
}
