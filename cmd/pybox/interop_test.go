package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/pybox/pybox/internal/testenv"
)

// interopDir holds the TypeScript SDK client; scripts/test.sh installs its
// node_modules with `npm ci`.
const interopDir = "../../testdata/interop"

// runTSClient runs the official TypeScript SDK client against pybox.
func runTSClient(t *testing.T, args ...string) {
	t.Helper()
	runTSScript(t, "client.mjs", nil, args...)
}

// runTSScript runs one of the TypeScript SDK client scripts.
func runTSScript(t *testing.T, script string, env []string, args ...string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(interopDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		if testenv.Required() {
			t.Fatalf("the TypeScript SDK is not installed: run `npm ci --prefix testdata/interop` (scripts/test.sh does)")
		}
		t.Skip("the TypeScript SDK is not installed: run `npm ci --prefix testdata/interop`")
	}
	cmd := exec.Command("node", append([]string{filepath.Join(interopDir, script)}, args...)...)
	cmd.Env = append(append(os.Environ(), "PYBOX_IMAGE="+image()), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	var res struct {
		OK       bool           `json:"ok"`
		Failures []string       `json:"failures"`
		Result   map[string]any `json:"result"`
	}
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		t.Fatalf("client output %q: %v (run error %v)", out, jerr, err)
	}
	if err != nil || !res.OK {
		t.Fatalf("TypeScript SDK %s over %s failed: %v %v", script, args[0], res.Failures, err)
	}
	t.Logf("TypeScript SDK %s over %s: %v", script, args[0], res.Result)
}

func TestTypeScriptSDKClient(t *testing.T) {
	testenv.Engine(t, image())
	const token = "interop-token-0123456789"
	t.Run("stdio", func(t *testing.T) { runTSClient(t, "stdio", binary) })
	t.Run("streamable-http", func(t *testing.T) {
		addr := startHTTP(t, "http", token)
		runTSClient(t, "http", "http://"+addr+"/mcp", token)
	})
	t.Run("sse", func(t *testing.T) {
		addr := startHTTP(t, "sse", token)
		runTSClient(t, "sse", "http://"+addr+"/sse", token)
	})
}

// TestTypeScriptSDKLongCalls is issue 15's acceptance through the official
// client, over stdio and Streamable HTTP: a 90 s call with a 60 s request
// timeout kept alive by progress that shows the output live and redacted;
// the same call as a task, created at once and polled, which no other
// connection sees; a cancelled task and an aborted call whose sandboxes are
// gone within 2 s; a plain call that hears no progress.
func TestTypeScriptSDKLongCalls(t *testing.T) {
	testenv.Engine(t, image())
	const token = "interop-token-0123456789"
	const secret = "pybox-planted-secret-7f3a91c2"
	env := []string{"PYBOX_PLANTED_SECRET=" + secret}
	t.Run("stdio", func(t *testing.T) {
		t.Parallel()
		runTSScript(t, "long.mjs", env, "stdio", binary)
	})
	t.Run("streamable-http", func(t *testing.T) {
		t.Parallel()
		addr, pid := startHTTPWith(t, "http", token, "PYBOX_POOL=0", "PYBOX_REDACT_VALUE="+secret)
		runTSScript(t, "long.mjs", env, "http", "http://"+addr+"/mcp", token, strconv.Itoa(pid))
	})
}
