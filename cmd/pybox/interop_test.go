package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/pybox/pybox/internal/testenv"
)

// interopDir holds the TypeScript SDK client; scripts/test.sh installs its
// node_modules with `npm ci`.
const interopDir = "../../testdata/interop"

// runTSClient runs the official TypeScript SDK client against pybox.
func runTSClient(t *testing.T, args ...string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(interopDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		if testenv.Required() {
			t.Fatalf("the TypeScript SDK is not installed: run `npm ci --prefix testdata/interop` (scripts/test.sh does)")
		}
		t.Skip("the TypeScript SDK is not installed: run `npm ci --prefix testdata/interop`")
	}
	cmd := exec.Command("node", append([]string{filepath.Join(interopDir, "client.mjs")}, args...)...)
	cmd.Env = append(os.Environ(), "PYBOX_IMAGE="+image())
	out, err := cmd.Output()
	var res struct {
		OK       bool
		Failures []string
		Result   map[string]any
	}
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		t.Fatalf("client output %q: %v (run error %v)", out, jerr, err)
	}
	if err != nil || !res.OK {
		t.Fatalf("TypeScript SDK client over %s failed: %v %v", args[0], res.Failures, err)
	}
	t.Logf("TypeScript SDK client over %s: %v", args[0], res.Result)
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
