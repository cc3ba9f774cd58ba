package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pybox/pybox/internal/testenv"
)

// exampleCommand maps an example's pybox path to the binary under test.
func exampleCommand(t *testing.T, command string) {
	t.Helper()
	if filepath.Base(command) != "pybox" || !filepath.IsAbs(command) {
		t.Fatalf("example command %q: want an absolute path to pybox (GUI clients have a short PATH)", command)
	}
}

// desktopConfig is Claude Desktop's claude_desktop_config.json.
type desktopConfig struct {
	MCPServers map[string]struct {
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
	} `json:"mcpServers"`
}

func TestClaudeDesktopExample(t *testing.T) {
	testenv.Engine(t, image())
	b, err := os.ReadFile("../../examples/claude_desktop_config.json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg desktopConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("claude_desktop_config.json: %v", err)
	}
	srv, ok := cfg.MCPServers["pybox"]
	if !ok {
		t.Fatal("no mcpServers.pybox entry")
	}
	exampleCommand(t, srv.Command)
	var env []string
	for k, v := range srv.Env {
		env = append(env, k+"="+v)
	}
	p := startProc(t, env, srv.Args...)
	a := p.runPython(map[string]any{"code": "print('desktop')"}, 60*time.Second)
	if a.Result.StructuredContent["stdout"] != "desktop\n" {
		t.Errorf("a call through the example's command line: %v", a.Result.StructuredContent)
	}
}

func TestClaudeCodeExample(t *testing.T) {
	testenv.Engine(t, image())
	line := claudeAddLine(t, "../../examples/claude_code.sh")
	// claude mcp add [options] <name> -- <command> [args...]
	before, after, ok := strings.Cut(line, " -- ")
	if !ok {
		t.Fatalf("no `claude mcp add ... -- command` line in claude_code.sh: %q", line)
	}
	if f := strings.Fields(before); f[len(f)-1] != "pybox" {
		t.Errorf("server name %q; want pybox", f[len(f)-1])
	}
	words := strings.Fields(after)
	exampleCommand(t, words[0])
	p := startProc(t, nil, words[1:]...)
	a := p.runPython(map[string]any{"code": "print('code')"}, 60*time.Second)
	if a.Result.StructuredContent["stdout"] != "code\n" {
		t.Errorf("a call through the example's command line: %v", a.Result.StructuredContent)
	}
}

// claudeAddLine returns the `claude mcp add` line of a script in examples.
func claudeAddLine(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "claude mcp add ") {
			return l
		}
	}
	t.Fatalf("%s has no `claude mcp add` line", path)
	return ""
}
