package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pybox/pybox/internal/testenv"
)

// interopBin returns the absolute path of the script a package in
// testdata/interop installs as its command bin (scripts/test.sh installs
// them with `npm ci`). Without it the test fails where engine tests must
// run, and skips elsewhere.
func interopBin(t *testing.T, pkg, bin string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(interopDir, "node_modules", filepath.FromSlash(pkg)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		if testenv.Required() {
			t.Fatalf("%s is not installed: run `npm ci --prefix testdata/interop` (scripts/test.sh does): %v", pkg, err)
		}
		t.Skipf("%s is not installed: run `npm ci --prefix testdata/interop`", pkg)
	}
	var meta struct {
		Version string            `json:"version"`
		Bin     map[string]string `json:"bin"`
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatalf("%s/package.json: %v", pkg, err)
	}
	if want := interopVersion(t, pkg); meta.Version != want {
		t.Fatalf("%s %s is installed; testdata/interop/package.json pins %s: run `npm ci --prefix testdata/interop`", pkg, meta.Version, want)
	}
	if meta.Bin[bin] == "" {
		t.Fatalf("%s has no bin %q: %v", pkg, bin, meta.Bin)
	}
	return filepath.Join(dir, filepath.FromSlash(meta.Bin[bin]))
}

// interopVersion is the exact version testdata/interop/package.json pins for pkg.
func interopVersion(t *testing.T, pkg string) string {
	t.Helper()
	var manifest struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	readJSON(t, filepath.Join(interopDir, "package.json"), &manifest)
	v := manifest.Dependencies[pkg]
	if v == "" || strings.ContainsAny(v, "^~<>=*x ") {
		t.Fatalf("testdata/interop/package.json: %s is %q; want an exact version", pkg, v)
	}
	return v
}

// inspector runs the MCP Inspector's CLI (`mcp-inspector-cli --cli`, the
// command behind v1's `npx @modelcontextprotocol/inspector --cli`) with args.
type inspector struct {
	t   *testing.T
	cli string
}

// run returns the inspector's stdout, its stderr and whether it exited 0.
func (in inspector) run(args ...string) (stdout []byte, stderr string, ok bool) {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{in.cli, "--cli"}, args...)...)
	// The CLI finds its own package.json by testing "../package.json" against
	// the working directory, then importing it relative to its module: run it
	// from its build directory, where both resolve to the same file.
	cmd.Dir = filepath.Dir(in.cli)
	// The stdio server inherits this environment.
	cmd.Env = append(os.Environ(), "PYBOX_IMAGE="+image(), "PYBOX_POOL=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = a
		if strings.ContainsAny(a, " ()'\"$") {
			quoted[i] = strconv.Quote(a)
		}
	}
	in.t.Logf("node %s --cli %s: %v", in.cli, strings.Join(quoted, " "), err)
	return out.Bytes(), errb.String(), err == nil
}

// json runs the inspector, requires it to succeed, and decodes what it prints.
func (in inspector) json(v any, args ...string) {
	in.t.Helper()
	out, stderr, ok := in.run(args...)
	if !ok {
		in.t.Fatalf("the inspector failed:\nstdout: %s\nstderr: %s", out, stderr)
	}
	if err := json.Unmarshal(out, v); err != nil {
		in.t.Fatalf("the inspector's output %q: %v\nstderr: %s", out, err, stderr)
	}
}

type inspectorCall struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
	IsError           bool           `json:"isError"`
}

// call makes one run_python call with the inspector's --tool-arg pairs
// (a value that parses as JSON is sent as that JSON value).
func (in inspector) call(target []string, toolArgs ...string) inspectorCall {
	in.t.Helper()
	args := append(slices.Clone(target), "--method", "tools/call", "--tool-name", "run_python")
	for _, a := range toolArgs {
		args = append(args, "--tool-arg", a)
	}
	var res inspectorCall
	in.json(&res, args...)
	sc := res.StructuredContent
	for _, k := range []string{"stdout", "stderr", "exit_code", "execution_time"} {
		if _, ok := sc[k]; !ok {
			in.t.Errorf("structuredContent lacks %q: %v", k, sc)
		}
	}
	var text map[string]any
	if len(res.Content) == 0 || res.Content[0].Type != "text" || json.Unmarshal([]byte(res.Content[0].Text), &text) != nil {
		in.t.Errorf("the first content block is not the result as JSON text: %+v", res.Content)
	} else if text["stdout"] != sc["stdout"] || text["exit_code"] != sc["exit_code"] || text["error"] != sc["error"] {
		in.t.Errorf("the text block %v differs from structuredContent %v", text, sc)
	}
	return res
}

// check lists the tools and makes calls through the inspector against target
// (a command line or a URL with its transport options).
func (in inspector) check(target ...string) {
	t := in.t
	t.Helper()

	var list struct {
		Tools []inspectorTool `json:"tools"`
	}
	in.json(&list, append(slices.Clone(target), "--method", "tools/list")...)
	i := slices.IndexFunc(list.Tools, func(tl inspectorTool) bool { return tl.Name == "run_python" })
	if i < 0 {
		t.Fatalf("tools/list through the inspector has no run_python: %+v", list.Tools)
	}
	tool := list.Tools[i]
	if tool.InputSchema.Type != "object" || tool.InputSchema.Properties["code"].Type != "string" || !slices.Contains(tool.InputSchema.Required, "code") {
		t.Errorf("run_python's inputSchema does not require a string code: %+v", tool.InputSchema)
	}
	for _, k := range []string{"stdout", "stderr", "exit_code", "execution_time"} {
		if !slices.Contains(tool.OutputSchema.Required, k) {
			t.Errorf("run_python's outputSchema does not require %q: %+v", k, tool.OutputSchema)
		}
	}

	res := in.call(target, "code=print(round(47/1283*100, 3))")
	sc := res.StructuredContent
	if sc["stdout"] != "3.663\n" || sc["exit_code"] != 0.0 || res.IsError {
		t.Errorf("47/1283 as a percentage: %v (isError %v); want stdout \"3.663\\n\", exit_code 0", sc, res.IsError)
	}
	if et, _ := sc["execution_time"].(float64); et <= 0 {
		t.Errorf("execution_time %v; want a positive number of seconds", sc["execution_time"])
	}

	// A program that fails ran: its own exit status, the traceback, no isError.
	res = in.call(target, "code=1/0")
	sc = res.StructuredContent
	if sc["exit_code"] != 1.0 || !strings.Contains(fmt.Sprint(sc["stderr"]), "ZeroDivisionError") || res.IsError || sc["error"] != nil {
		t.Errorf("1/0: %v (isError %v); want exit_code 1, a ZeroDivisionError traceback, no error and no isError", sc, res.IsError)
	}

	// A call without code comes back in-band: isError and invalid_input.
	res = in.call(target, "timeout=5")
	sc = res.StructuredContent
	if !res.IsError || sc["error"] != "invalid_input" || !strings.Contains(fmt.Sprint(sc["stderr"]), `"code"`) || sc["exit_code"] != 1.0 {
		t.Errorf("a call without code: %v (isError %v); want isError, error invalid_input, exit_code 1 and a stderr naming \"code\"", sc, res.IsError)
	}
}

type inspectorTool struct {
	Name         string `json:"name"`
	InputSchema  schema `json:"inputSchema"`
	OutputSchema schema `json:"outputSchema"`
}

type schema struct {
	Type       string `json:"type"`
	Properties map[string]struct {
		Type string `json:"type"`
	} `json:"properties"`
	Required []string `json:"required"`
}

// TestInspectorCLI drives pybox with the MCP Inspector's CLI, as a user
// checking a server by hand would: over stdio (the inspector starts the
// binary), Streamable HTTP and SSE (with the bearer token as a header).
func TestInspectorCLI(t *testing.T) {
	testenv.Engine(t, image())
	cli := interopBin(t, "@modelcontextprotocol/inspector-cli", "mcp-inspector-cli")
	const token = "inspector-token-0123456789"
	auth := "Authorization: Bearer " + token

	t.Run("stdio", func(t *testing.T) {
		inspector{t, cli}.check(binary, "serve")
	})
	for _, tr := range []struct{ name, server, path, flag string }{
		{"streamable-http", "http", "/mcp", "http"},
		{"sse", "sse", "/sse", "sse"},
	} {
		t.Run(tr.name, func(t *testing.T) {
			in := inspector{t, cli}
			url := "http://" + startHTTP(t, tr.server, token) + tr.path
			in.check(url, "--transport", tr.flag, "--header", auth)
			// The header is what lets the inspector in.
			out, stderr, ok := in.run(url, "--transport", tr.flag, "--method", "tools/list")
			if ok || bytes.Contains(out, []byte("run_python")) {
				t.Errorf("the inspector without the token listed the tools: %s", out)
			}
			if !strings.Contains(stderr, "bearer token") && !strings.Contains(stderr, "401") {
				t.Errorf("the inspector without the token does not say why it failed: %s", stderr)
			}
		})
	}
}
