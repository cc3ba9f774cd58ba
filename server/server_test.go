package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/rs/zerolog"

	"github.com/pybox/pybox/internal/testenv"
	"github.com/pybox/pybox/redact"
	"github.com/pybox/pybox/sandbox"
)

// fakeRunner returns a fixed result, or panics: the server's own error
// paths, which no real engine produces on demand.
type fakeRunner struct {
	res   sandbox.Result
	panic bool
	got   []sandbox.Request
	// slowStart: StartSession waits for its context to end.
	slowStart bool
}

func (f *fakeRunner) Run(_ context.Context, req sandbox.Request) sandbox.Result {
	f.got = append(f.got, req)
	if f.panic {
		panic("boom with sk-ant-api03-" + strings.Repeat("A", 40))
	}
	return f.res
}

// connect starts srv and returns an initialized in-process client.
func connect(t testing.TB, opt Options) *client.Client {
	t.Helper()
	srv := New(opt)
	t.Cleanup(func() { srv.Close(context.Background()) })
	c, err := client.NewInProcessClient(srv.MCP())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func call(t *testing.T, c *client.Client, args any) (*mcp.CallToolResult, Output) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = ToolName
	req.Params.Arguments = args
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatalf("CallTool(%v) returned a protocol error: %v; want an in-band result", args, err)
	}
	var out Output
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	if len(res.Content) == 0 {
		t.Fatal("no text content")
	}
	text, ok := res.Content[0].(mcp.TextContent)
	if !ok {
		t.Fatalf("first content is %T; want text", res.Content[0])
	}
	var fromText Output
	if err := json.Unmarshal([]byte(text.Text), &fromText); err != nil {
		t.Fatalf("text block %q is not the JSON result: %v", text.Text, err)
	}
	if diff := cmp.Diff(out, fromText); diff != "" {
		t.Errorf("text block differs from structuredContent (-structured +text):\n%s", diff)
	}
	// The four fields are always present.
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"stdout", "stderr", "exit_code", "execution_time"} {
		if _, ok := m[k]; !ok {
			t.Errorf("structuredContent lacks %q: %s", k, b)
		}
	}
	return res, out
}

func TestToolSchemas(t *testing.T) {
	c := connect(t, Options{Runner: &fakeRunner{}})
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	sort.Strings(names)
	if diff := cmp.Diff([]string{SessionsToolName, ToolName}, names); diff != "" {
		t.Fatalf("tools (-want +got):\n%s", diff)
	}
	var run mcp.Tool
	for _, tl := range tools.Tools {
		if tl.Name == ToolName {
			run = tl
		}
	}
	b, _ := json.Marshal(run)
	var tool struct {
		Description  string
		InputSchema  map[string]any
		OutputSchema map[string]any
	}
	json.Unmarshal(b, &tool)
	if tool.InputSchema["type"] != "object" || tool.OutputSchema["type"] != "object" {
		t.Errorf("schemas: input %v, output %v", tool.InputSchema, tool.OutputSchema)
	}
	req, _ := tool.OutputSchema["required"].([]any)
	if diff := cmp.Diff([]any{"stdout", "stderr", "exit_code", "execution_time"}, req); diff != "" {
		t.Errorf("output schema required (-want +got):\n%s", diff)
	}
	if !strings.Contains(tool.Description, "exit_code") || !strings.Contains(tool.Description, "pandas") {
		t.Errorf("description does not tell the model what it needs: %q", tool.Description)
	}
}

func TestInvalidInput(t *testing.T) {
	r := &fakeRunner{}
	c := connect(t, Options{Runner: r, MaxTimeout: 60 * time.Second})
	tests := []struct {
		name string
		args any
		want string
	}{
		{"no arguments", nil, `"code" is required`},
		{"no code", map[string]any{"timeout": 3}, `"code" is required`},
		{"code not a string", map[string]any{"code": 42}, `"code" must be a string`},
		{"timeout a string", map[string]any{"code": "1", "timeout": "5"}, `"timeout" must be a number`},
		{"timeout above max", map[string]any{"code": "1", "timeout": 61}, "at most 60"},
		{"timeout zero", map[string]any{"code": "1", "timeout": 0}, "more than 0"},
		{"timeout negative", map[string]any{"code": "1", "timeout": -1}, "more than 0"},
		{"unknown field", map[string]any{"code": "1", "timout": 5}, `unknown argument "timout"`},
		{"code too big", map[string]any{"code": strings.Repeat("#", sandbox.MaxCodeBytes+1)}, "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out := call(t, c, tt.args)
			if !res.IsError || out.Error != "invalid_input" || out.ExitCode != 1 {
				t.Errorf("isError %v, error %q, exit %d; want true, invalid_input, 1", res.IsError, out.Error, out.ExitCode)
			}
			if !strings.Contains(out.Stderr, tt.want) {
				t.Errorf("stderr %q; want it to say %q", out.Stderr, tt.want)
			}
		})
	}
	if len(r.got) != 0 {
		t.Errorf("the runner ran %d bad inputs", len(r.got))
	}
}

func TestResultShaping(t *testing.T) {
	tests := []struct {
		name    string
		res     sandbox.Result
		isError bool
		want    Output
	}{
		{
			name: "ran and failed",
			res:  sandbox.Result{Stderr: "Traceback", ExitCode: 1, Duration: 1500 * time.Millisecond},
			want: Output{Stderr: "Traceback", ExitCode: 1, ExecutionTime: 1.5},
		},
		{
			name: "timeout is not isError",
			res:  sandbox.Result{Stdout: "x", ExitCode: 124, Error: sandbox.ErrTimeout, Duration: 2 * time.Second, Truncated: true},
			want: Output{Stdout: "x", ExitCode: 124, ExecutionTime: 2, Error: "timeout", Truncated: true},
		},
		{
			name:    "engine down is isError",
			res:     sandbox.Result{Stderr: "pybox: the Docker engine did not answer", ExitCode: 1, Error: sandbox.ErrSandboxUnavailable},
			isError: true,
			want:    Output{Stderr: "pybox: the Docker engine did not answer", ExitCode: 1, Error: "sandbox_unavailable"},
		},
		{
			name: "lost is not isError: the code ran",
			res:  sandbox.Result{Stdout: "up\n", Stderr: "pybox: the sandbox was killed from outside pybox\n", ExitCode: 137, Error: sandbox.ErrSandboxLost, Duration: time.Second},
			want: Output{Stdout: "up\n", Stderr: "pybox: the sandbox was killed from outside pybox\n", ExitCode: 137, ExecutionTime: 1, Error: "sandbox_lost"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := connect(t, Options{Runner: &fakeRunner{res: tt.res}, Redactor: redact.MustNew(redact.Options{})})
			res, out := call(t, c, map[string]any{"code": "print(1)"})
			if res.IsError != tt.isError {
				t.Errorf("isError = %v; want %v", res.IsError, tt.isError)
			}
			if diff := cmp.Diff(tt.want, out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPanicBecomesFourFields(t *testing.T) {
	var logs bytes.Buffer
	rd := redact.MustNew(redact.Options{})
	c := connect(t, Options{Runner: &fakeRunner{panic: true}, Redactor: rd, Logger: zerolog.New(&logs)})
	res, out := call(t, c, map[string]any{"code": "print(1)"})
	if !res.IsError || out.Error != "sandbox_unavailable" || out.ExitCode != 1 || out.Stderr == "" {
		t.Errorf("after a panic: isError %v, %+v; want the four fields with sandbox_unavailable", res.IsError, out)
	}
	if strings.Contains(logs.String(), "sk-ant-api03-AAAA") {
		t.Errorf("the panic's secret reached the log: %s", logs.String())
	}
	// The server still serves.
	if _, out := call(t, c, map[string]any{"code": 1}); out.Error != "invalid_input" {
		t.Errorf("after a panic the server answered %+v", out)
	}
}

func TestLogLineHasNoCodeOrOutput(t *testing.T) {
	var logs bytes.Buffer
	r := &fakeRunner{res: sandbox.Result{Stdout: "OUTPUT-MARKER", Duration: time.Millisecond}}
	c := connect(t, Options{Runner: r, Logger: zerolog.New(&logs).Level(zerolog.InfoLevel)})
	call(t, c, map[string]any{"code": "print('CODE-MARKER')"})
	line := logs.String()
	for _, w := range []string{`"call":`, `"exit_code":0`, `"stdout_bytes":13`, `"duration":`} {
		if !strings.Contains(line, w) {
			t.Errorf("log line %q lacks %s", line, w)
		}
	}
	if strings.Contains(line, "CODE-MARKER") || strings.Contains(line, "OUTPUT-MARKER") {
		t.Errorf("log line carries code or output: %s", line)
	}
}

func TestRealEngineThroughMCP(t *testing.T) {
	image := testenv.Image(sandbox.DefaultImage)
	testenv.Engine(t, image)
	sb, err := sandbox.New(sandbox.Options{Image: image}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	c := connect(t, Options{Runner: sb, Redactor: redact.MustNew(redact.Options{})})
	res, out := call(t, c, map[string]any{"code": "print(round(47/1283*100, 3))", "timeout": 20})
	if res.IsError || out.Stdout != "3.663\n" || out.ExitCode != 0 || out.ExecutionTime <= 0 {
		t.Errorf("got isError %v, %+v; want stdout 3.663, exit 0, positive time", res.IsError, out)
	}
}

func (f *fakeRunner) StartSession(ctx context.Context) (*sandbox.Session, sandbox.Result) {
	if f.slowStart {
		<-ctx.Done()
		return nil, sandbox.Result{ExitCode: sandbox.ExitNotRun, Error: sandbox.ErrCancelled, Stderr: "cancelled"}
	}
	return nil, sandbox.Result{ExitCode: sandbox.ExitNotRun, Error: sandbox.ErrSandboxUnavailable, Stderr: "fake"}
}

// TestSessionStartCountsAgainstTimeout: a session that does not start
// within the call's timeout ends the call at its timeout, as a sandbox
// that did not start.
func TestSessionStartCountsAgainstTimeout(t *testing.T) {
	c := connect(t, Options{Runner: &fakeRunner{slowStart: true}})
	start := time.Now()
	res, out := call(t, c, map[string]any{"code": "1", "session_id": "new", "timeout": 0.3})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a 0.3 s call whose session never started returned after %v", took)
	}
	if out.Error != "sandbox_unavailable" || !res.IsError || !strings.Contains(out.Stderr, "did not start within the call's timeout") {
		t.Errorf("got %+v; want sandbox_unavailable saying the session did not start in time", out)
	}
}

// TestOnCallTiming: every call, a bad one and a panic included, tells
// OnCall where its time went, with the sandbox's part as the runner gave it.
func TestOnCallTiming(t *testing.T) {
	var got []Timing
	st := sandbox.Timing{Source: sandbox.SourcePool, Run: 3 * time.Millisecond, Transit: time.Millisecond}
	r := &fakeRunner{res: sandbox.Result{Stdout: "1\n", Duration: 3 * time.Millisecond, Timing: st}}
	c := connect(t, Options{Runner: r, OnCall: func(c Call) { got = append(got, c.Timing) }})
	call(t, c, map[string]any{"code": "print(1)"})
	call(t, c, map[string]any{"code": 5})
	r.panic = true
	call(t, c, map[string]any{"code": "print(1)"})
	if len(got) != 3 {
		t.Fatalf("OnCall was told of %d calls; want 3", len(got))
	}
	if got[0].Sandbox != st || got[0].Error != "" || got[0].Handler < got[0].Decode+got[0].Encode {
		t.Errorf("a clean call's timing = %+v; want the sandbox's %+v, no error, a handler spanning decode and encode", got[0], st)
	}
	if got[1].Error != string(sandbox.ErrInvalidInput) || got[1].Sandbox.Source != sandbox.SourceNone {
		t.Errorf("a bad call's timing = %+v; want invalid_input and no sandbox", got[1])
	}
	if got[2].Error != string(sandbox.ErrSandboxUnavailable) {
		t.Errorf("a panicking call's timing = %+v; want sandbox_unavailable", got[2])
	}
}

// TestOnCallRecord: what OnCall is told of a call for the audit log and
// the metrics: who, a digest and sizes of what went in and came out, how
// it ended; and of a refused call, no digest.
func TestOnCallRecord(t *testing.T) {
	var got []Call
	res := sandbox.Result{Stdout: "hello\n", Stderr: "x", StdoutBytes: 600, StderrBytes: 1, ExitCode: 3, Duration: 4 * time.Millisecond,
		Files: []sandbox.OutputFile{{Path: "a.txt", Data: []byte("12345"), Text: true}}, Timing: sandbox.Timing{Source: sandbox.SourcePool}}
	c := connect(t, Options{Runner: &fakeRunner{res: res}, OnCall: func(c Call) { got = append(got, c) }})
	code := "print('hello')"
	call(t, c, map[string]any{"code": code, "files": []map[string]any{{"path": "in.csv", "content": "a,b\n"}}})
	call(t, c, map[string]any{"code": code, "timeout": -1})
	if len(got) != 2 {
		t.Fatalf("OnCall was told of %d calls; want 2", len(got))
	}
	sum := sha256.Sum256([]byte(code))
	r := got[0]
	if len(r.ID) != 16 || r.Start.IsZero() || r.CodeSHA256 != hex.EncodeToString(sum[:]) || r.CodeBytes != len(code) ||
		r.InputFiles != 1 || r.InputBytes != 4 || r.InSession || r.StdoutBytes != 600 || r.StderrBytes != 1 ||
		r.OutputFiles != 1 || r.OutputBytes != 5 || r.RedactedBytes != 6+1+5 || r.ExitCode != 3 || r.Error != "" ||
		r.ExecutionTime != 4*time.Millisecond || r.Timing.Sandbox.Source != sandbox.SourcePool {
		t.Errorf("the call's record: %+v", r)
	}
	if r := got[1]; r.CodeSHA256 != "" || r.CodeBytes != 0 || r.Error != string(sandbox.ErrInvalidInput) || r.ID == got[0].ID {
		t.Errorf("a refused call's record: %+v", r)
	}
}
