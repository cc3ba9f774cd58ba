package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pybox/pybox/internal/testenv"
	"github.com/pybox/pybox/sandbox"
)

// binary is the pybox command built once for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pybox-e2e-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "pybox")
	if b := os.Getenv("PYBOX_TEST_BINARY"); b != "" {
		// Another build under the same tests, to show a fault test fails
		// on an earlier version.
		binary = b
	} else if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building pybox: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	testenv.ClosePrivate()
	os.RemoveAll(dir)
	os.Exit(code)
}

func image() string { return testenv.Image(sandbox.DefaultImage) }

// proc is a pybox server over stdio, spoken to in raw JSON-RPC so that
// tests control every message, cancellation included.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *syncBuffer
	mu     sync.Mutex
	waits  map[int]chan json.RawMessage
	nextID int
	exited chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startProcIn(t, nil, env, args...)
}

// startProcIn starts it under a wrapper command (nsenter into the
// Kubernetes test cluster's network namespace, which execs the server in
// its own process).
func startProcIn(t *testing.T, wrap []string, env []string, args ...string) *proc {
	t.Helper()
	argv := append(append(append([]string(nil), wrap...), binary), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	// No pool unless a test asks: these tests count the server's containers.
	cmd.Env = append(os.Environ(), "PYBOX_IMAGE="+image(), "PYBOX_POOL=0")
	cmd.Env = append(cmd.Env, env...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	p := &proc{t: t, cmd: cmd, stdin: stdin, stderr: &syncBuffer{}, waits: map[int]chan json.RawMessage{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var msg struct {
				ID *int `json:"id"`
			}
			line := append([]byte(nil), sc.Bytes()...)
			if json.Unmarshal(line, &msg) != nil || msg.ID == nil {
				continue
			}
			p.mu.Lock()
			ch := p.waits[*msg.ID]
			p.mu.Unlock()
			if ch != nil {
				ch <- line
			}
		}
	}()
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			stdin.Close()
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("server stderr:\n%s", p.stderr.String())
		}
	})
	p.request("initialize", map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "e2e", "version": "1"},
	}, 30*time.Second)
	p.notify("notifications/initialized", map[string]any{})
	return p
}

func (p *proc) send(v any) {
	b, _ := json.Marshal(v)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("writing to the server: %v", err)
	}
}

func (p *proc) notify(method string, params any) {
	p.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// start sends a request and returns its id and the channel of its answer.
func (p *proc) start(method string, params any) (int, chan json.RawMessage) {
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	ch := make(chan json.RawMessage, 1)
	p.waits[id] = ch
	p.mu.Unlock()
	p.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return id, ch
}

func (p *proc) request(method string, params any, timeout time.Duration) json.RawMessage {
	p.t.Helper()
	_, ch := p.start(method, params)
	select {
	case r := <-ch:
		return r
	case <-time.After(timeout):
		p.t.Fatalf("%s: no answer within %v", method, timeout)
	}
	return nil
}

type toolAnswer struct {
	Result struct {
		IsError           bool           `json:"isError"`
		StructuredContent map[string]any `json:"structuredContent"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (p *proc) runPython(args map[string]any, timeout time.Duration) toolAnswer {
	p.t.Helper()
	raw := p.request("tools/call", map[string]any{"name": "run_python", "arguments": args}, timeout)
	var a toolAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		p.t.Fatalf("answer %s: %v", raw, err)
	}
	if a.Error != nil {
		p.t.Fatalf("tools/call ended as a JSON-RPC error: %s", a.Error.Message)
	}
	for _, k := range []string{"stdout", "stderr", "exit_code", "execution_time"} {
		if _, ok := a.Result.StructuredContent[k]; !ok {
			p.t.Errorf("result lacks %q: %s", k, raw)
		}
	}
	return a
}

// endStdio closes the server's stdin, its client's end, and waits for it
// to exit.
func (p *proc) endStdio(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not exit within 60 s of stdin's end")
	}
}

// ownerPrefix is the owner label prefix of the server process's containers.
func (p *proc) ownerPrefix() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/", host, p.cmd.Process.Pid)
}

// containersOf lists the labelled containers whose owner label starts with prefix.
func containersOf(t *testing.T, prefix string) []string {
	t.Helper()
	return containersAt(t, "", prefix)
}

// containersAt lists them on the engine at host ("" for the environment's).
func containersAt(t *testing.T, host, prefix string) []string {
	t.Helper()
	opt := client.FromEnv
	if host != "" {
		opt = client.WithHost(host)
	}
	cli, err := client.NewClientWithOpts(opt, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelManaged+"=true"))})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	var ids []string
	for _, c := range cs {
		if strings.HasPrefix(c.Labels[sandbox.LabelOwner], prefix) {
			ids = append(ids, c.ID[:12]+"("+c.State+")")
		}
	}
	return ids
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStdioCall(t *testing.T) {
	testenv.Engine(t, image())
	p := startProc(t, nil)
	raw := p.request("tools/list", map[string]any{}, 10*time.Second)
	if !bytes.Contains(raw, []byte(`"run_python"`)) || !bytes.Contains(raw, []byte(`"outputSchema"`)) || !bytes.Contains(raw, []byte(`"inputSchema"`)) {
		t.Errorf("tools/list = %s; want run_python with both schemas", raw)
	}
	a := p.runPython(map[string]any{"code": "print(round(47/1283*100, 3))"}, 60*time.Second)
	sc := a.Result.StructuredContent
	if sc["stdout"] != "3.663\n" || sc["exit_code"] != 0.0 || sc["execution_time"].(float64) <= 0 || a.Result.IsError {
		t.Errorf("result %v; want stdout 3.663, exit 0, positive time", sc)
	}
	// The info line per call, on stderr, without the code or its output.
	waitFor(t, "the call's log line", 5*time.Second, func() bool { return strings.Contains(p.stderr.String(), `"message":"run_python"`) })
	logs := p.stderr.String()
	if strings.Contains(logs, "47/1283") || strings.Contains(logs, "3.663") {
		t.Errorf("the log carries code or output:\n%s", logs)
	}
}

// TestFloodKeepsServerSmall floods stdout through a real server and reads
// the server process's peak memory.
func TestFloodKeepsServerSmall(t *testing.T) {
	testenv.Engine(t, image())
	p := startProc(t, nil)
	start := time.Now()
	a := p.runPython(map[string]any{"code": "import sys\nprint('HEAD')\nwhile True:\n    sys.stdout.write('y' * 65536 + '\\n')", "timeout": 4}, 30*time.Second)
	took := time.Since(start)
	sc := a.Result.StructuredContent
	out, _ := sc["stdout"].(string)
	if sc["error"] != "timeout" || sc["truncated"] != true || !strings.HasPrefix(out, "HEAD\n") || strings.Trim(out[max(0, len(out)-1000):], "y\n") != "" || !strings.Contains(out, "bytes omitted") {
		t.Errorf("flood result: error %v truncated %v stdout %.40q...; want timeout, truncated, head and tail", sc["error"], sc["truncated"], out)
	}
	if took > 6*time.Second {
		t.Errorf("the flood returned after %v; want by its 4 s timeout", took)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var hwm int
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			hwm, _ = strconv.Atoi(strings.Fields(l)[1])
		}
	}
	t.Logf("server peak RSS during a %v flood: %d KiB", took.Round(time.Millisecond), hwm)
	if hwm == 0 || hwm > 100*1024 {
		t.Errorf("server peak RSS = %d KiB; want under 100 MiB", hwm)
	}
}

func TestClientCancellationRemovesContainer(t *testing.T) {
	testenv.Engine(t, image())
	p := startProc(t, nil)
	id, ch := p.start("tools/call", map[string]any{"name": "run_python", "arguments": map[string]any{"code": "import time\ntime.sleep(60)", "timeout": 120}})
	waitFor(t, "the call's container", 30*time.Second, func() bool { return len(containersOf(t, p.ownerPrefix())) > 0 })
	p.notify("notifications/cancelled", map[string]any{"requestId": id, "reason": "test"})
	waitFor(t, "removal after cancellation", 15*time.Second, func() bool { return len(containersOf(t, p.ownerPrefix())) == 0 })
	select {
	case r := <-ch:
		t.Logf("the cancelled call was answered anyway: %.200s", r)
	default:
	}
	// The server is still serving.
	a := p.runPython(map[string]any{"code": "print(2)"}, 60*time.Second)
	if a.Result.StructuredContent["stdout"] != "2\n" {
		t.Errorf("after a cancellation: %v", a.Result.StructuredContent)
	}
}

func TestSIGTERMMidCallLeavesNothing(t *testing.T) {
	testenv.Engine(t, image())
	p := startProc(t, nil)
	p.start("tools/call", map[string]any{"name": "run_python", "arguments": map[string]any{"code": "while True: pass", "timeout": 120}})
	waitFor(t, "the call's container", 30*time.Second, func() bool { return len(containersOf(t, p.ownerPrefix())) > 0 })
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(40 * time.Second):
		t.Fatal("the server did not exit within 40 s of SIGTERM")
	}
	if left := containersOf(t, p.ownerPrefix()); len(left) > 0 {
		t.Errorf("containers left after SIGTERM: %v", left)
	}
}

func TestExecExitStatusAndEnvTwins(t *testing.T) {
	testenv.Engine(t, image())
	tests := []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		check    func(t *testing.T, out map[string]any)
	}{
		{"exit status is exit_code", nil, []string{"exec", "-c", "import sys; print('hi'); sys.exit(3)"}, 3, func(t *testing.T, out map[string]any) {
			if out["stdout"] != "hi\n" {
				t.Errorf("stdout %q", out["stdout"])
			}
		}},
		{"PYBOX_TIMEOUT applies", []string{"PYBOX_TIMEOUT=1s"}, []string{"exec", "-c", "while True: pass"}, 124, func(t *testing.T, out map[string]any) {
			// The timeout bounds the whole call; the code ran for the rest.
			if et := out["execution_time"].(float64); et < 0.3 || et > 1.0 {
				t.Errorf("execution_time %v; want a little under 1 s", et)
			}
		}},
		{"a flag wins over its variable", []string{"PYBOX_TIMEOUT=1s"}, []string{"exec", "--timeout", "2s", "-c", "while True: pass"}, 124, func(t *testing.T, out map[string]any) {
			if et := out["execution_time"].(float64); et <= 1.0 || et > 2.0 {
				t.Errorf("execution_time %v; want a little under 2 s", et)
			}
		}},
		{"code from stdin", nil, []string{"exec", "-"}, 0, nil},
		{"redaction flags and variables", []string{"PYBOX_REDACT_VALUE=flag-known-value-1,flag-known-value-2"}, []string{"exec", "--redact-pattern", "employee=EMP-[0-9]{6}", "--redact-disable", "url_credentials", "-c", "print('EMP-123456 flag-known-value-2 ftp://u:pw123@h')"}, 0, func(t *testing.T, out map[string]any) {
			if out["stdout"] != "[REDACTED:employee] [REDACTED:known_secret] ftp://u:pw123@h\n" {
				t.Errorf("stdout %q", out["stdout"])
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(binary, tt.args...)
			cmd.Env = append(append(os.Environ(), "PYBOX_IMAGE="+image()), tt.env...)
			cmd.Stdin = strings.NewReader("print(40 + 2)")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Errorf("exit status %d; want %d\nstdout %s\nstderr %s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			var out map[string]any
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
				t.Fatalf("stdout is not the JSON result: %v\n%s", err, stdout.String())
			}
			if int(out["exit_code"].(float64)) != tt.wantCode {
				t.Errorf("exit_code %v; want %d", out["exit_code"], tt.wantCode)
			}
			if tt.check != nil {
				tt.check(t, out)
			}
		})
	}
}

func TestHelpNamesEveryVariable(t *testing.T) {
	out, err := exec.Command(binary, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, w := range []string{"PYBOX_TRANSPORT", "PYBOX_ADDR", "PYBOX_AUTH_TOKEN", "PYBOX_MEMORY", "PYBOX_PIDS", "PYBOX_RUNTIME", "PYBOX_TIMEOUT", "default 256MiB", "default 127.0.0.1:8765"} {
		if !bytes.Contains(out, []byte(w)) {
			t.Errorf("--help lacks %q", w)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startHTTP runs pybox serve on a free loopback port and waits for it.
func startHTTP(t *testing.T, transportName, token string) string {
	t.Helper()
	addr, _ := startHTTPWith(t, transportName, token)
	return addr
}

// startHTTPWith starts it with more environment; it returns its address
// and process id.
func startHTTPWith(t *testing.T, transportName, token string, env ...string) (string, int) {
	t.Helper()
	addr, cmd := startHTTPIn(t, nil, (&net.Dialer{}).DialContext, transportName, token, env...)
	return addr, cmd.Process.Pid
}

// startHTTPIn starts it under a wrapper command (nsenter into the
// Kubernetes test cluster's network namespace), waiting until dial reaches
// it; it returns its address and process.
func startHTTPIn(t *testing.T, wrap []string, dial func(ctx context.Context, network, addr string) (net.Conn, error), transportName, token string, env ...string) (string, *exec.Cmd) {
	t.Helper()
	addr := freeAddr(t)
	argv := append(append(append([]string(nil), wrap...), binary), "serve", "--transport", transportName, "--addr", addr)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "PYBOX_IMAGE="+image(), "PYBOX_AUTH_TOKEN="+token, "PYBOX_POOL="+cmp.Or(os.Getenv("PYBOX_POOL"), "0")), env...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("server stderr:\n%s", stderr.String())
		}
	})
	waitFor(t, "the HTTP server", 30*time.Second, func() bool {
		c, err := dial(context.Background(), "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr, cmd
}

func TestHTTPTransportsRequireToken(t *testing.T) {
	testenv.Engine(t, image())
	const token = "test-token-0123456789"
	for _, tr := range []struct{ name, path, method string }{{"http", "/mcp", "POST"}, {"sse", "/sse", "GET"}, {"sse", "/message", "POST"}} {
		t.Run(tr.name+tr.path, func(t *testing.T) {
			addr := startHTTP(t, tr.name, token)
			for _, auth := range []string{"", "Bearer wrong", "Basic " + token, "Bearer " + token + "x"} {
				req, _ := http.NewRequest(tr.method, "http://"+addr+tr.path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
				req.Header.Set("Content-Type", "application/json")
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("%s %s with Authorization %q: status %d; want 401", tr.method, tr.path, auth, resp.StatusCode)
				}
			}
		})
	}
	t.Run("token accepted over Streamable HTTP", func(t *testing.T) {
		addr := startHTTP(t, "http", token)
		c, err := mcpclient.NewStreamableHttpClient("http://"+addr+"/mcp", transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		init := mcp.InitializeRequest{}
		init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
		init.Params.ClientInfo = mcp.Implementation{Name: "e2e", Version: "1"}
		if _, err := c.Initialize(ctx, init); err != nil {
			t.Fatal(err)
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = "run_python"
		req.Params.Arguments = map[string]any{"code": "print(6*7)"}
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if !bytes.Contains(b, []byte(`"stdout":"42\n"`)) {
			t.Errorf("call over HTTP with the token: %s", b)
		}
	})
}

func TestNonLoopbackWithoutTokenRefusesToStart(t *testing.T) {
	for _, tr := range []string{"http", "sse"} {
		for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0"} {
			cmd := exec.Command(binary, "serve", "--transport", tr, "--addr", addr)
			cmd.Env = append(os.Environ(), "PYBOX_AUTH_TOKEN=")
			out, err := cmd.CombinedOutput()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 2 {
				t.Errorf("serve --transport %s --addr %s: %v; want exit status 2", tr, addr, err)
			}
			if !bytes.Contains(out, []byte("PYBOX_AUTH_TOKEN")) {
				t.Errorf("serve --transport %s --addr %s said %q; want it to name PYBOX_AUTH_TOKEN", tr, addr, out)
			}
		}
	}
}
