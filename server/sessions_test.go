package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pybox/pybox/sandbox"
)

func sessionsCall(t *testing.T, c *client.Client, args map[string]any) sessionsOutput {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = SessionsToolName
	req.Params.Arguments = args
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out sessionsOutput
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	return out
}

func TestSessionsThroughMCP(t *testing.T) {
	opt := realServer(t, sandbox.Options{})
	opt.MaxSessions = 2
	opt.SessionIdle = 1500 * time.Millisecond
	c := connect(t, opt)

	_, first := call(t, c, map[string]any{"code": "x = 41\nimport statistics\nopen('/tmp/keep.txt', 'w').write('kept')", "session_id": "new"})
	id := first.SessionID
	if len(id) != 32 || first.ExitCode != 0 {
		t.Fatalf("a new session: %+v", first)
	}
	_, second := call(t, c, map[string]any{"code": "print(x + 1, statistics.mean([1, 2]), open('/tmp/keep.txt').read())", "session_id": id})
	if second.Stdout != "42 1.5 kept\n" || second.SessionID != id {
		t.Errorf("in the same session: %+v", second)
	}
	_, other := call(t, c, map[string]any{"code": "print('x' in globals())", "session_id": "new"})
	if other.Stdout != "False\n" || other.SessionID == id {
		t.Errorf("a second session: %+v", other)
	}
	// The cap: a third live session is refused.
	res, third := call(t, c, map[string]any{"code": "1", "session_id": "new"})
	if third.Error != "too_many_requests" || !res.IsError {
		t.Errorf("past the cap: %+v", third)
	}
	list := sessionsCall(t, c, map[string]any{})
	if len(list.Sessions) != 2 {
		t.Errorf("python_sessions lists %d sessions; want 2: %+v", len(list.Sessions), list)
	}
	ended := sessionsCall(t, c, map[string]any{"end": other.SessionID})
	if len(ended.Ended) != 1 || len(ended.Sessions) != 1 {
		t.Errorf("ending one: %+v", ended)
	}
	res, gone := call(t, c, map[string]any{"code": "1", "session_id": other.SessionID})
	if gone.Error != "session_expired" || !res.IsError || gone.ExitCode != 1 {
		t.Errorf("an ended session: %+v", gone)
	}
	res, unknown := call(t, c, map[string]any{"code": "1", "session_id": strings.Repeat("ab", 16)})
	if unknown.Error != "session_expired" || !res.IsError {
		t.Errorf("an unknown id: %+v", unknown)
	}
	// Idle expiry.
	time.Sleep(3 * time.Second)
	_, idle := call(t, c, map[string]any{"code": "print(x)", "session_id": id})
	if idle.Error != "session_expired" {
		t.Errorf("after the idle time: %+v", idle)
	}
}

func TestSessionTimeoutThroughMCP(t *testing.T) {
	c := connect(t, realServer(t, sandbox.Options{}))
	_, a := call(t, c, map[string]any{"code": "n = 1", "session_id": "new"})
	_, b := call(t, c, map[string]any{"code": "while True: n += 1", "session_id": a.SessionID, "timeout": 1})
	if b.Error != "timeout" || b.ExitCode != 124 || !strings.Contains(b.Stderr, "KeyboardInterrupt") {
		t.Errorf("a timeout in a session: %+v", b)
	}
	_, c2 := call(t, c, map[string]any{"code": "print(n > 1)", "session_id": a.SessionID})
	if c2.Stdout != "True\n" {
		t.Errorf("after the timeout the session lost its state: %+v", c2)
	}
	_, m := call(t, c, map[string]any{"code": "s = 'a' * 600_000_000", "session_id": a.SessionID})
	if m.Error != "memory_limit" || m.ExitCode != 137 {
		t.Errorf("a memory kill: %+v", m)
	}
	// The session goes on with a fresh Python process, as a notebook's
	// kernel restarts: the variables are gone, the session is not.
	res, after := call(t, c, map[string]any{"code": "print('n' in globals())", "session_id": a.SessionID})
	if after.Stdout != "False\n" || res.IsError || after.SessionID != a.SessionID {
		t.Errorf("after a memory kill: %+v", after)
	}
}
