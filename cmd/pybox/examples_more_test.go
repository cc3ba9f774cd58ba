package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/pybox/pybox/internal/testenv"
)

// exerciseHTTPEntry starts pybox over Streamable HTTP with a token, points
// the example's URL at it, fills the example's header placeholders with
// the token, and makes a call with exactly those headers.
func exerciseHTTPEntry(t *testing.T, rawURL string, headers map[string]string) {
	t.Helper()
	const token = "example-token-0123456789"
	if !strings.HasPrefix(rawURL, "http://127.0.0.1:8765/mcp") {
		t.Fatalf("example URL %q: want the default http://127.0.0.1:8765/mcp", rawURL)
	}
	addr := startHTTP(t, "http", token)
	filled := map[string]string{}
	for k, v := range headers {
		for _, ph := range []string{"${input:pybox-token}", "${env:PYBOX_AUTH_TOKEN}", "${PYBOX_AUTH_TOKEN}"} {
			v = strings.ReplaceAll(v, ph, token)
		}
		filled[k] = v
	}
	if filled["Authorization"] != "Bearer "+token {
		t.Fatalf("the example's Authorization header %q does not carry the token", headers["Authorization"])
	}
	c, err := mcpclient.NewStreamableHttpClient("http://"+addr+"/mcp", transport.WithHTTPHeaders(filled))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	initClient(t, c)
	out, _ := runVia(t, c, map[string]any{"code": "print('over http')"})
	if out["stdout"] != "over http\n" {
		t.Errorf("a call through the example's HTTP entry: %v", out)
	}
}

func initClient(t *testing.T, c *mcpclient.Client) {
	t.Helper()
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	init := mcpInit()
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}
}

// exerciseStdioEntry runs the example's command (the binary under test in
// place of the installed path) and makes a call.
func exerciseStdioEntry(t *testing.T, command string, args []string) {
	t.Helper()
	exampleCommand(t, command)
	p := startProc(t, nil, args...)
	a := p.runPython(map[string]any{"code": "print('over stdio')"}, 60*time.Second)
	if a.Result.StructuredContent["stdout"] != "over stdio\n" {
		t.Errorf("a call through the example's stdio entry: %v", a.Result.StructuredContent)
	}
}

func TestVSCodeExample(t *testing.T) {
	testenv.Engine(t, image())
	var cfg struct {
		Servers map[string]struct {
			Type    string            `json:"type"`
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"servers"`
	}
	readJSON(t, "../../examples/vscode/.vscode/mcp.json", &cfg)
	stdio, http := cfg.Servers["pybox"], cfg.Servers["pybox-http"]
	if stdio.Type != "stdio" || http.Type != "http" {
		t.Fatalf("types %q and %q; want stdio and http", stdio.Type, http.Type)
	}
	exerciseStdioEntry(t, stdio.Command, stdio.Args)
	exerciseHTTPEntry(t, http.URL, http.Headers)
}

func TestCursorExample(t *testing.T) {
	testenv.Engine(t, image())
	var cfg struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	readJSON(t, "../../examples/cursor/mcp.json", &cfg)
	exerciseStdioEntry(t, cfg.MCPServers["pybox"].Command, cfg.MCPServers["pybox"].Args)
	exerciseHTTPEntry(t, cfg.MCPServers["pybox-http"].URL, cfg.MCPServers["pybox-http"].Headers)
}

func TestClaudeCodeHTTPExample(t *testing.T) {
	testenv.Engine(t, image())
	line := claudeAddLine(t, "../../examples/claude_code_http.sh")
	if !strings.Contains(line, "--transport http") {
		t.Fatalf("no --transport http in %q", line)
	}
	var url, header string
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "http://") {
			url = f
		}
	}
	if i := strings.Index(line, `--header "`); i >= 0 {
		header = strings.TrimSuffix(line[i+len(`--header "`):], `"`)
	}
	k, v, ok := strings.Cut(header, ": ")
	if !ok {
		t.Fatalf("no header in %q", line)
	}
	exerciseHTTPEntry(t, url, map[string]string{k: v})
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGoClientExample runs examples/client against the binary under test.
func TestGoClientExample(t *testing.T) {
	testenv.Engine(t, image())
	out := t.TempDir()
	cmd := exec.Command("go", "run", "../../examples/client", "-pybox", binary, "-out", out)
	cmd.Env = append(os.Environ(), "PYBOX_IMAGE="+image(), "PYBOX_POOL=0")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("examples/client: %v\n%s", err, b)
	}
	for _, want := range []string{"tool: run_python", "stdout: \"mean of sin over a period: ", "exit_code: 0", "execution_time: ", "image: "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("output lacks %q:\n%s", want, b)
		}
	}
	png, err := os.ReadFile(filepath.Join(out, "image_1.png"))
	if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Errorf("the saved image is not a PNG: %v", err)
	}
}
