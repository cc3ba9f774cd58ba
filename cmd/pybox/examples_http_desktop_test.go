package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pybox/pybox/internal/testenv"
)

// TestClaudeDesktopHTTPExample runs examples/claude_desktop_config.http.json
// as Claude Desktop would: its command (mcp-remote, from testdata/interop in
// place of `npx -y`, with the example's own arguments) and its environment,
// spoken to over stdio, bridging to a real pybox over Streamable HTTP with a
// token. Only the URL's address and the token's placeholder are filled in.
func TestClaudeDesktopHTTPExample(t *testing.T) {
	testenv.Engine(t, image())
	var cfg desktopConfig
	readJSON(t, "../../examples/claude_desktop_config.http.json", &cfg)
	srv, ok := cfg.MCPServers["pybox"]
	if !ok {
		t.Fatal("no mcpServers.pybox entry")
	}

	// npx -y mcp-remote@<the version testdata/interop pins> URL args...
	pin := "mcp-remote@" + interopVersion(t, "mcp-remote")
	if srv.Command != "npx" || len(srv.Args) < 3 || srv.Args[0] != "-y" || srv.Args[1] != pin {
		t.Fatalf("the example runs %q %q; want npx -y %s URL ... (the version testdata/interop/package.json pins)", srv.Command, srv.Args, pin)
	}
	// The README shows the entry, with the same version.
	for doc, want := range map[string]string{
		"../../README.md":          `"` + pin + `"`,
		"../../examples/README.md": "(claude_desktop_config.http.json)",
	} {
		if b, err := os.ReadFile(doc); err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s (%v)", doc, want, err)
		}
	}
	proxy := interopBin(t, "mcp-remote", "mcp-remote")
	args := slices.Clone(srv.Args[2:])

	const token = "desktop-token-0123456789"
	const defaultURL = "http://127.0.0.1:8765/mcp"
	if args[0] != defaultURL {
		t.Fatalf("the example's URL %q; want the default %s", args[0], defaultURL)
	}
	args[0] = "http://" + startHTTP(t, "http", token) + "/mcp"

	// The header goes in through an environment variable, without a space in
	// the argument: Claude Desktop on Windows does not quote arguments.
	h := slices.Index(args, "--header")
	if h < 0 || h+1 >= len(args) || strings.ContainsAny(args[h+1], " \t") {
		t.Fatalf("the example's arguments %q; want --header with a value without spaces", args)
	}
	name, value, _ := strings.Cut(args[h+1], ":")
	ref, isRef := strings.CutPrefix(value, "${")
	ref, isRef2 := strings.CutSuffix(ref, "}")
	if name != "Authorization" || !isRef || !isRef2 || srv.Env[ref] == "" {
		t.Fatalf("--header %q: want Authorization:${VAR} with VAR in the example's env %v", args[h+1], srv.Env)
	}
	const placeholder = "<your PYBOX_AUTH_TOKEN>"
	if srv.Env[ref] != "Bearer "+placeholder {
		t.Fatalf("env %s = %q; want %q", ref, srv.Env[ref], "Bearer "+placeholder)
	}
	home := t.TempDir() // mcp-remote keeps its state under ~/.mcp-auth
	env := []string{"HOME=" + home, "MCP_REMOTE_CONFIG_DIR=" + filepath.Join(home, ".mcp-auth")}
	for k, v := range srv.Env {
		env = append(env, k+"="+strings.ReplaceAll(v, placeholder, token))
	}

	var stderr syncBuffer
	c, err := mcpclient.NewStdioMCPClientWithOptions("node", env, append([]string{proxy}, args...),
		transport.WithCommandStderrWriter(&stderr))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s %s", proxy, strings.Join(args, " "))
	defer func() {
		c.Close()
		if t.Failed() {
			t.Logf("mcp-remote stderr:\n%s", stderr.String())
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := c.Initialize(ctx, mcpInit()); err != nil {
		t.Fatalf("initialize through mcp-remote: %v", err)
	}
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list through mcp-remote: %v", err)
	}
	i := slices.IndexFunc(tools.Tools, func(tl mcp.Tool) bool { return tl.Name == "run_python" })
	if i < 0 {
		t.Fatalf("tools/list through mcp-remote has no run_python: %v", tools.Tools)
	}
	if _, ok := tools.Tools[i].InputSchema.Properties["code"]; !ok || !slices.Contains(tools.Tools[i].InputSchema.Required, "code") {
		t.Errorf("run_python's inputSchema through mcp-remote lacks a required code: %+v", tools.Tools[i].InputSchema)
	}

	out, isError := runVia(t, c, map[string]any{"code": "print(round(47/1283*100, 3))"})
	if out["stdout"] != "3.663\n" || out["stderr"] != "" || out["exit_code"] != 0.0 || isError {
		t.Errorf("a call through mcp-remote: %v (isError %v); want stdout \"3.663\\n\", no stderr, exit_code 0", out, isError)
	}
	if et, _ := out["execution_time"].(float64); et <= 0 {
		t.Errorf("execution_time %v; want a positive number of seconds", out["execution_time"])
	}

	out, isError = runVia(t, c, map[string]any{"timeout": 5})
	if !isError || out["error"] != "invalid_input" || out["exit_code"] != 1.0 || !strings.Contains(fmt.Sprint(out["stderr"]), `"code"`) {
		t.Errorf("a call without code through mcp-remote: %v (isError %v); want an in-band invalid_input", out, isError)
	}
}
