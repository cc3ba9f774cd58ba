package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pybox/pybox/internal/testenv"
)

// The server-side attack suite: the attacks on what the server does around
// the sandbox (who may reach a session, what an output file's name and
// content cost and carry out, what a web page may send), each a class,
// run against the real binary under each runtime the engine has. Every
// class failed on 24024b1 (PYBOX_TEST_BINARY runs an older build).

// Planted secrets, of shapes the redactor knows.
var (
	plantedGitHub = "ghp_" + strings.Repeat("R8kLq2", 6)
	plantedAWS    = "AKIA" + "Q3EXAMPLE7TOKEN2"
	plantedSlack  = "xoxb-" + "2468013579-1357924680-" + strings.Repeat("aZ", 12)
	planted       = []string{plantedGitHub, plantedAWS, plantedSlack}
)

func TestServerAttacks(t *testing.T) {
	testenv.Engine(t, image())
	for _, rt := range engineRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			t.Run("SessionTakeover", func(t *testing.T) { attackSessionTakeover(t, rt) })
			t.Run("OutputNameFlood", func(t *testing.T) { attackOutputNameFlood(t, rt) })
			t.Run("RedactionCPUSink", func(t *testing.T) { attackRedactionCPUSink(t, rt) })
			t.Run("SecretsThatDodgeRedaction", func(t *testing.T) { attackSecretsThatDodgeRedaction(t, rt) })
			t.Run("BrowserPage", func(t *testing.T) { attackBrowserPage(t, rt) })
			t.Run("ResourceURIEscape", func(t *testing.T) { attackResourceURIEscape(t, rt) })
		})
	}
}

// engineRuntimes are runc and, when the engine has it, runsc; in CI runsc
// must be there.
func engineRuntimes(t *testing.T) []string {
	out, err := execOutput("docker", "info", "--format", "{{json .Runtimes}}")
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	rts := []string{"runc"}
	if strings.Contains(out, `"runsc"`) {
		rts = append(rts, "runsc")
	} else if testenv.Required() {
		t.Fatalf("the engine has no runsc runtime (%s): run scripts/ensure-gvisor.sh", out)
	}
	return rts
}

// modern makes one request of protocol 2026-07-28 (no initialize, no MCP
// session: the version in a header and in _meta) and returns the JSON-RPC
// response's raw bytes and its HTTP status.
func modern(t *testing.T, addr, token, method string, params map[string]any) ([]byte, int) {
	t.Helper()
	return modernWith(t, &http.Client{Timeout: 3 * time.Minute}, addr, token, method, params)
}

// modernWith makes it with a client of the caller's.
func modernWith(t *testing.T, c *http.Client, addr, token, method string, params map[string]any) ([]byte, int) {
	t.Helper()
	const version = "2026-07-28"
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": version,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "attacker", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", version)
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(d, `"id":1`) {
				return []byte(d), resp.StatusCode
			}
		}
	}
	return raw, resp.StatusCode
}

// toolResult is the part of a tools/call answer the attacks read.
type toolResult struct {
	Result struct {
		Structured map[string]any `json:"structuredContent"`
		IsError    bool           `json:"isError"`
		Content    []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Data     string `json:"data"`
			Resource *struct {
				URI      string `json:"uri"`
				MIMEType string `json:"mimeType"`
				Text     string `json:"text"`
				Blob     string `json:"blob"`
			} `json:"resource"`
		} `json:"content"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func modernTool(t *testing.T, addr, token, tool string, args map[string]any) (toolResult, []byte) {
	t.Helper()
	raw, status := modern(t, addr, token, "tools/call", map[string]any{"name": tool, "arguments": args})
	var r toolResult
	if err := json.Unmarshal(raw, &r); err != nil || status != http.StatusOK {
		t.Fatalf("%s: HTTP %d, %v: %.300s", tool, status, err, raw)
	}
	if r.Error != nil {
		t.Fatalf("%s: %s", tool, r.Error.Message)
	}
	return r, raw
}

func sessionIDs(r toolResult) []string {
	var ids []string
	list, _ := r.Result.Structured["sessions"].([]any)
	for _, s := range list {
		m, _ := s.(map[string]any)
		id, _ := m["session_id"].(string)
		ids = append(ids, id)
	}
	return ids
}

// attackSessionTakeover: clients of the newest protocol have no MCP
// connection. Without tokens, one must not list or end another's
// sessions; with named tokens, one principal must not list, run in or end
// another's, even holding its id.
func attackSessionTakeover(t *testing.T, rt string) {
	t.Run("anonymous", func(t *testing.T) {
		s := startServer(t, "--transport", "http", "--runtime", rt)
		a, _ := modernTool(t, s.addr, "", "run_python", map[string]any{"code": "secret_var = 'alice-private-41'", "session_id": "new"})
		sid, _ := a.Result.Structured["session_id"].(string)
		if sid == "" {
			t.Fatalf("no session: %v", a.Result.Structured)
		}
		if b, _ := modernTool(t, s.addr, "", "python_sessions", map[string]any{}); len(sessionIDs(b)) != 0 {
			t.Errorf("another client lists the session: %v", b.Result.Structured)
		}
		if b, _ := modernTool(t, s.addr, "", "python_sessions", map[string]any{"end": "all"}); len(b.Result.Structured["ended"].([]any)) != 0 {
			t.Errorf(`another client's {"end": "all"} ended %v`, b.Result.Structured["ended"])
		}
		r, _ := modernTool(t, s.addr, "", "run_python", map[string]any{"code": "print(secret_var)", "session_id": sid})
		if r.Result.Structured["stdout"] != "alice-private-41\n" {
			t.Errorf("the holder of the id lost its session: %v", r.Result.Structured)
		}
	})
	t.Run("principals", func(t *testing.T) {
		const alice, bob = "alice-token-0123456789", "bob-token-0123456789ab"
		s := startServer(t, "--transport", "http", "--runtime", rt, "--auth-token", "alice:"+alice, "--auth-token", "bob:"+bob)
		a, _ := modernTool(t, s.addr, alice, "run_python", map[string]any{"code": "secret_var = 'alice-private-42'", "session_id": "new"})
		sid, _ := a.Result.Structured["session_id"].(string)
		if sid == "" {
			t.Fatalf("no session: %v", a.Result.Structured)
		}
		if b, _ := modernTool(t, s.addr, bob, "python_sessions", map[string]any{}); len(sessionIDs(b)) != 0 {
			t.Errorf("bob lists alice's session: %v", b.Result.Structured)
		}
		if b, _ := modernTool(t, s.addr, bob, "run_python", map[string]any{"code": "print(secret_var)", "session_id": sid}); b.Result.Structured["error"] != "session_expired" {
			t.Errorf("bob ran in alice's session: %v", b.Result.Structured)
		}
		if b, _ := modernTool(t, s.addr, bob, "python_sessions", map[string]any{"end": sid}); len(b.Result.Structured["ended"].([]any)) != 0 {
			t.Errorf("bob ended alice's session: %v", b.Result.Structured)
		}
		if a, _ := modernTool(t, s.addr, alice, "python_sessions", map[string]any{}); !slices.Contains(sessionIDs(a), sid) {
			t.Errorf("alice does not see her own session from another request: %v", a.Result.Structured)
		}
		if a, _ := modernTool(t, s.addr, alice, "run_python", map[string]any{"code": "print(secret_var)", "session_id": sid}); a.Result.Structured["stdout"] != "alice-private-42\n" {
			t.Errorf("alice lost her session: %v", a.Result.Structured)
		}
	})
}

// attackOutputNameFlood: output file names cost what their bytes cost.
// Overlong or unprintable names are left out with a note; names count in
// --max-output-bytes, so the answer stays within it.
func attackOutputNameFlood(t *testing.T, rt string) {
	const limit = 64 << 10
	s := startServer(t, "--transport", "http", "--runtime", rt, "--max-output-bytes", strconv.Itoa(limit), "--max-output-files", "500")
	r, raw := modernTool(t, s.addr, "", "run_python", map[string]any{"code": `import os
# A path far past 1024 bytes, in folders of 200-byte names.
deep = "/mnt/outputs/" + "/".join(["d" * 200] * 20)
os.makedirs(deep)
open(deep + "/x.txt", "w").write("deep")
open("/mnt/outputs/evil\u202egnp.txt", "w").write("bidi")
# 300 names of about 870 bytes, empty: 260 KB of names for a 64 KiB limit.
for i in range(300):
    d = "/mnt/outputs/n/%03d/%s/%s/%s" % (i, "a" * 250, "b" * 250, "c" * 250)
    os.makedirs(d)
    open(d + "/" + "e" * 100, "w").close()
print("ok")
`, "timeout": 120})
	if r.Result.Structured["stdout"] != "ok\n" {
		t.Fatalf("the code did not run: %v", r.Result.Structured)
	}
	stderr, _ := r.Result.Structured["stderr"].(string)
	files, _ := r.Result.Structured["files"].([]any)
	names := 0
	for _, f := range files {
		p, _ := f.(map[string]any)["path"].(string)
		names += len(p)
		if len(p) > 1024 || strings.ContainsRune(p, '\u202e') {
			t.Errorf("a file came back with a name of %d bytes: %.80q", len(p), p)
		}
	}
	if names > limit {
		t.Errorf("%d files with %d bytes of names came back for a %d-byte limit", len(files), names, limit)
	}
	if !strings.Contains(stderr, "names included") || !strings.Contains(stderr, "at most 1024 bytes") {
		t.Errorf("no note on the names left out: %.600s", stderr)
	}
	// Each name leaves three times (the result, its text, the URI): the
	// answer is bounded by the limit, not by what the code wrote.
	if len(raw) > 4*limit+64<<10 {
		t.Errorf("the answer is %d bytes for a %d-byte output limit", len(raw), limit)
	}
	t.Logf("%d files came back with %d bytes of names; the answer is %d bytes", len(files), names, len(raw))
}

// attackRedactionCPUSink: 20 MiB of credential-dense text files, written
// in well under a second, cost the server no more than the call's
// timeout: redaction runs in the call's slot and against its clock, and
// what it cannot finish is withheld.
func attackRedactionCPUSink(t *testing.T, rt string) {
	s := startServer(t, "--transport", "http", "--runtime", rt)
	before := cpuSeconds(t, s.cmd.Process.Pid)
	const timeout = 30
	start := time.Now()
	r, _ := modernTool(t, s.addr, "", "run_python", map[string]any{"code": denseFilesCode, "timeout": timeout})
	took := time.Since(start)
	cpu := cpuSeconds(t, s.cmd.Process.Pid) - before
	t.Logf("the call answered in %v; the server used %.1f s of CPU (timeout %d s)", took.Round(time.Millisecond), cpu, timeout)
	if r.Result.Structured["stdout"] != "written\n" {
		t.Fatalf("the code did not run: %v", r.Result.Structured)
	}
	if took > (timeout+5)*time.Second {
		t.Errorf("the answer took %v, past the call's %d s timeout", took, timeout)
	}
	if cpu > timeout {
		t.Errorf("the server spent %.1f s of CPU on a call of %d s", cpu, timeout)
	}
	for _, c := range r.Result.Content {
		if c.Resource != nil && strings.Contains(c.Resource.Text+c.Resource.Blob, "sk-ant-api03-0000") {
			t.Errorf("%s came back unredacted", c.Resource.URI)
		}
	}
	stderr, _ := r.Result.Structured["stderr"].(string)
	files, _ := r.Result.Structured["files"].([]any)
	if len(files) != 2 && !strings.Contains(stderr, "withheld") {
		t.Errorf("%d files and no note of any withheld: %s", len(files), stderr)
	}
}

// cpuSeconds is the user and system CPU time a process has used.
func cpuSeconds(t *testing.T, pid int) float64 {
	s, err := procCPUSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// attackSecretsThatDodgeRedaction: a secret leaves in no form: not as a
// file's name, not in a text file of any extension or encoding, not in a
// binary file's bytes.
func attackSecretsThatDodgeRedaction(t *testing.T, rt string) {
	s := startServer(t, "--transport", "http", "--runtime", rt)
	code := fmt.Sprintf(`gh, aws, slack = %q, %q, %q
o = "/mnt/outputs/"
open(o + "token-" + gh + ".txt", "w").write("named after a token")
open(o + "latin1.csv", "wb").write(("caf\xe9,%%s\n" %% gh).encode("latin-1"))
open(o + "utf16.txt", "wb").write(("aws=%%s\n" %% aws).encode("utf-16"))
for ext in ["pem", "key", "sh", "toml", "sql", "ipynb", "rtf", "weird"]:
    open(o + "f." + ext, "w").write("tok = '%%s'\naws = '%%s'\n" %% (slack, aws))
open(o + "data.bin", "wb").write(b"\x00\x01\x02" + gh.encode() + b"\x00\xff")
print("ok")
`, plantedGitHub, plantedAWS, plantedSlack)
	r, raw := modernTool(t, s.addr, "", "run_python", map[string]any{"code": code})
	if r.Result.Structured["stdout"] != "ok\n" {
		t.Fatalf("the code did not run: %v", r.Result.Structured)
	}
	everything := string(raw)
	for _, c := range r.Result.Content {
		if c.Resource != nil && c.Resource.Blob != "" {
			b, _ := base64.StdEncoding.DecodeString(c.Resource.Blob)
			everything += "\n" + string(b)
		}
	}
	for _, p := range planted {
		if strings.Contains(everything, p) || strings.Contains(everything, url.PathEscape(p)) {
			t.Errorf("the planted %.8s... token left the server", p)
		}
	}
	files, _ := r.Result.Structured["files"].([]any)
	if len(files) != 12 {
		t.Errorf("%d files came back; want all 12, redacted: %v", len(files), files)
	}
}

// attackBrowserPage: a web page of another origin reaches no endpoint of
// either HTTP transport; no answer carries a wildcard CORS header; a POST
// must be application/json, so no "simple" request skips the preflight.
func attackBrowserPage(t *testing.T, rt string) {
	const evil = "http://evil.example"
	do := func(method, u, origin, ctype, body string) (*http.Response, string) {
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		req.Header.Set("Accept", "application/json, text/event-stream")
		c := &http.Client{Timeout: 2 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			// An event stream that stays open times out: read what came.
			return nil, err.Error()
		}
		defer resp.Body.Close()
		b := make([]byte, 4096)
		n, _ := io.ReadAtLeast(resp.Body, b, 1)
		return resp, string(b[:n])
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"page","version":"1"}}}`
	check := func(what string, resp *http.Response, body string, wantStatus int) {
		t.Helper()
		if resp == nil {
			t.Errorf("%s: no answer (%s); want HTTP %d", what, body, wantStatus)
			return
		}
		if resp.StatusCode != wantStatus {
			t.Errorf("%s: HTTP %d %.200s; want %d", what, resp.StatusCode, body, wantStatus)
		}
		if acao := resp.Header.Get("Access-Control-Allow-Origin"); acao == "*" {
			t.Errorf("%s: Access-Control-Allow-Origin: *", what)
		}
	}

	sse := startServer(t, "--transport", "sse", "--runtime", rt)
	resp, body := do(http.MethodGet, "http://"+sse.addr+"/sse", evil, "", "")
	check("GET /sse from "+evil, resp, body, http.StatusForbidden)
	// A live SSE session's endpoint, as a page would learn it from its
	// own stream: the page's posts to it must still be refused.
	stream, err := http.Get("http://" + sse.addr + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if acao := stream.Header.Get("Access-Control-Allow-Origin"); acao != "" {
		t.Errorf("GET /sse without Origin: Access-Control-Allow-Origin %q; want none", acao)
	}
	endpoint := ""
	for sc := bufio.NewScanner(stream.Body); endpoint == "" && sc.Scan(); {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			endpoint = d
		}
	}
	if !strings.HasPrefix(endpoint, "/message") && !strings.Contains(endpoint, "/message?") {
		t.Fatalf("no endpoint event on /sse: %q", endpoint)
	}
	if !strings.HasPrefix(endpoint, "http") {
		endpoint = "http://" + sse.addr + endpoint
	}
	resp, body = do(http.MethodPost, endpoint, evil, "text/plain", initialize)
	check("POST /message text/plain from "+evil, resp, body, http.StatusForbidden)
	resp, body = do(http.MethodPost, endpoint, evil, "application/json", initialize)
	check("POST /message from "+evil, resp, body, http.StatusForbidden)
	resp, body = do(http.MethodPost, endpoint, "", "text/plain", initialize)
	check("POST /message text/plain", resp, body, http.StatusUnsupportedMediaType)
	resp, body = do(http.MethodPost, endpoint, "http://localhost:5173", "application/json", initialize)
	check("POST /message from a loopback page", resp, body, http.StatusAccepted)

	h := startServer(t, "--transport", "http", "--runtime", rt, "--allowed-origin", "https://app.example.com")
	resp, body = do(http.MethodPost, "http://"+h.addr+"/mcp", evil, "application/json", initialize)
	check("POST /mcp from "+evil, resp, body, http.StatusForbidden)
	resp, body = do(http.MethodPost, "http://"+h.addr+"/mcp", "", "text/plain", initialize)
	check("POST /mcp text/plain", resp, body, http.StatusUnsupportedMediaType)
	resp, body = do(http.MethodGet, "http://"+h.addr+"/mcp", evil, "", "")
	check("GET /mcp from "+evil, resp, body, http.StatusForbidden)
	for _, ok := range []string{"http://localhost:6274", "http://127.0.0.1:3000", "https://app.example.com"} {
		resp, body = do(http.MethodPost, "http://"+h.addr+"/mcp", ok, "application/json", initialize)
		check("POST /mcp from "+ok, resp, body, http.StatusOK)
		if resp != nil && resp.Header.Get("Access-Control-Allow-Origin") != ok {
			t.Errorf("POST /mcp from %s: Access-Control-Allow-Origin %q; want the origin itself", ok, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	// A page of an allowed origin runs code: the edge lets it through.
	r, _ := modern(t, h.addr, "", "tools/call", map[string]any{"name": "run_python", "arguments": map[string]any{"code": "print(6*7)"}})
	if !strings.Contains(string(r), `"stdout":"42\n"`) {
		t.Errorf("a call without Origin: %.300s", r)
	}
}

// attackResourceURIEscape: a file's name stays one name under
// /mnt/outputs in its resource URI, for any client that decodes it; and
// python_sessions keeps its own output schema for an unknown id.
func attackResourceURIEscape(t *testing.T, rt string) {
	s := startServer(t, "--transport", "http", "--runtime", rt)
	r, _ := modernTool(t, s.addr, "", "run_python", map[string]any{"code": `import os
o = "/mnt/outputs/"
os.makedirs(o + "%2e%2e/%2e%2e/home/user/.ssh")
open(o + "%2e%2e/%2e%2e/home/user/.ssh/authorized_keys", "w").write("ssh-ed25519 AAAA")
open(o + "what?x=1#frag.txt", "w").write("q")
open(o + "100% sure.txt", "w").write("p")
print("ok")
`})
	if r.Result.Structured["stdout"] != "ok\n" {
		t.Fatalf("the code did not run: %v", r.Result.Structured)
	}
	n := 0
	for _, c := range r.Result.Content {
		if c.Resource == nil {
			continue
		}
		n++
		u, err := url.Parse(c.Resource.URI)
		if err != nil {
			t.Errorf("%q does not parse: %v", c.Resource.URI, err)
			continue
		}
		if u.RawQuery != "" || u.Fragment != "" || !strings.HasPrefix(path.Clean(u.Path), "/mnt/outputs/") {
			t.Errorf("%q resolves to %q (query %q, fragment %q): outside /mnt/outputs or not one name", c.Resource.URI, path.Clean(u.Path), u.RawQuery, u.Fragment)
		}
		found := false
		for _, f := range r.Result.Structured["files"].([]any) {
			if "/mnt/outputs/"+f.(map[string]any)["path"].(string) == u.Path {
				found = true
			}
		}
		if !found {
			t.Errorf("%q decodes to %q, which names no file of the result", c.Resource.URI, u.Path)
		}
	}
	if n != 3 {
		t.Errorf("%d resources; want 3", n)
	}
	e, raw := modernTool(t, s.addr, "", "python_sessions", map[string]any{"end": "no-such-session"})
	if ended, ok := e.Result.Structured["ended"].([]any); !ok || len(ended) != 0 {
		t.Errorf(`{"end": "<unknown>"} answered %s; want "ended": []`, raw)
	}
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}
