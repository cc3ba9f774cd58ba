package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// Task defaults.
const (
	// DefaultMaxTasks caps the tasks the server keeps (running, or done
	// and waiting to be fetched).
	DefaultMaxTasks = 32
	// DefaultMaxTasksPerConnection caps those of one connection.
	DefaultMaxTasksPerConnection = 8
	// DefaultTaskRetention is how long a task's result is kept once the
	// call's time is up.
	DefaultTaskRetention = 10 * time.Minute
	// taskSlack covers a call's wait for a slot and its sandbox's start
	// beyond its timeout.
	taskSlack = 30 * time.Second
)

// tasks runs run_python as MCP tasks (2025-11-25) on top of mcp-go's task
// store, and keeps what the store does not:
//
//   - who owns a task. Only a request on a connection (an MCP session) may
//     make one, and mcp-go answers tasks/get, tasks/result, tasks/cancel and
//     tasks/list only to the connection that made it: the owner rule of the
//     Python sessions (see ownerOf), where a task's owner is always its
//     connection. A request without one (protocol 2026-07-28 has no
//     connection, and mcp-go's store none to check) is told so.
//   - how many a connection and the server keep, until their time is up.
//   - the call's own lifetime. mcp-go runs a task's handler under the
//     request's context, which ends as soon as the task is created; the
//     call instead runs under a context of its own, which tasks/cancel, the
//     connection's end and the server's shutdown end.
//   - its time to live: the call's timeout, its start, then the retention;
//     the client's wish is not taken (mcp-go keeps a task without one for
//     ever).
type tasks struct {
	max, maxPerConn int
	retention       time.Duration

	mu      sync.Mutex
	pending map[*mcpserver.RequestProtocolInfo]*pendingTask // a task's request, until its call starts
	live    map[string]*taskEntry                           // by task id, until its time is up
	perConn map[string]int
}

type pendingTask struct {
	at  time.Time
	ttl time.Duration
	id  string // once created
}

type taskEntry struct {
	conn   string
	cancel context.CancelFunc // set while the call runs
	ended  bool               // cancelled before the call began
}

func newTasks(max, maxPerConn int, retention time.Duration) *tasks {
	if max <= 0 {
		max = DefaultMaxTasks
	}
	if maxPerConn <= 0 {
		maxPerConn = DefaultMaxTasksPerConnection
	}
	if maxPerConn > max {
		maxPerConn = max
	}
	if retention <= 0 {
		retention = DefaultTaskRetention
	}
	return &tasks{max: max, maxPerConn: maxPerConn, retention: retention,
		pending: map[*mcpserver.RequestProtocolInfo]*pendingTask{}, live: map[string]*taskEntry{}, perConn: map[string]int{}}
}

// connOf is the connection a request came on, or "".
func connOf(ctx context.Context) string {
	if cs := mcpserver.ClientSessionFromContext(ctx); cs != nil {
		return cs.SessionID()
	}
	return ""
}

// admit is an OnRequestInitialization hook: it refuses a task request
// that has no connection to own it, that is over a limit, or that names a
// task of another connection, with a JSON-RPC error that says why.
func (t *tasks) admit(ctx context.Context, _ any, message any) error {
	raw, ok := message.(json.RawMessage)
	if !ok {
		return nil
	}
	var m struct {
		Method string `json:"method"`
		Params struct {
			Task   json.RawMessage `json:"task"`
			TaskID string          `json:"taskId"`
		} `json:"params"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return nil // mcp-go answers a malformed request itself
	}
	switch mcp.MCPMethod(m.Method) {
	case mcp.MethodToolsCall:
		if len(m.Params.Task) == 0 || string(m.Params.Task) == "null" {
			return nil
		}
		conn := connOf(ctx)
		if conn == "" {
			return fmt.Errorf("pybox: a task needs a connection to belong to (an initialized MCP session, protocol 2025-11-25); this request has none. Call run_python without \"task\", with a progressToken to hear from a long call")
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.perConn[conn] >= t.maxPerConn {
			return fmt.Errorf("pybox: this connection keeps %d tasks, the most it may (--max-tasks-per-connection); fetch their results and wait for them to expire, or call without \"task\"", t.perConn[conn])
		}
		if len(t.live) >= t.max {
			return fmt.Errorf("pybox: the server keeps %d tasks, the most it may (--max-tasks); try again later, or call without \"task\"", len(t.live))
		}
	case mcp.MethodTasksGet, mcp.MethodTasksResult, mcp.MethodTasksCancel, mcp.MethodTasksList:
		conn := connOf(ctx)
		if conn == "" {
			return fmt.Errorf("pybox: tasks answer only to the connection that made them, and this request has none")
		}
		if m.Params.TaskID == "" {
			return nil
		}
		t.mu.Lock()
		e := t.live[m.Params.TaskID]
		t.mu.Unlock()
		if e != nil && e.conn != conn {
			return fmt.Errorf("task not found") // as mcp-go says it: no hint that it exists
		}
	}
	return nil
}

// setTTL is a BeforeCallTool hook: a task lives for the call's time, then
// the retention.
func (t *tasks) setTTL(h *handler) func(context.Context, any, *mcp.CallToolRequest) {
	return func(ctx context.Context, _ any, req *mcp.CallToolRequest) {
		if req.Params.Task == nil {
			return
		}
		timeout := h.opt.MaxTimeout
		if in, err := parseInput(req.GetRawArguments(), h.opt); err == nil {
			timeout = in.Timeout
		}
		ttl := timeout + taskSlack + t.retention
		ms := ttl.Milliseconds()
		req.Params.Task.TTL = &ms
		if info := mcpserver.RequestProtocolInfoFromContext(ctx); info != nil {
			t.mu.Lock()
			now := time.Now()
			for k, p := range t.pending { // requests that made no task
				if now.Sub(p.at) > time.Minute {
					delete(t.pending, k)
				}
			}
			t.pending[info] = &pendingTask{at: now, ttl: ttl}
			t.mu.Unlock()
		}
	}
}

// created is an OnTaskCreated hook (mcp-go holds its task lock: nothing
// here may call back into it).
func (t *tasks) created(ctx context.Context, m mcpserver.TaskMetrics) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ttl := t.retention + taskSlack + 300*time.Second
	if p := t.pending[mcpserver.RequestProtocolInfoFromContext(ctx)]; p != nil {
		p.id = m.TaskID
		ttl = p.ttl
	}
	t.live[m.TaskID] = &taskEntry{conn: m.SessionID}
	t.perConn[m.SessionID]++
	// mcp-go forgets the task at its TTL; so does this, a little later.
	time.AfterFunc(ttl+time.Second, func() { t.forget(m.TaskID) })
}

func (t *tasks) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.live[id]
	if e == nil {
		return
	}
	if e.cancel != nil {
		e.cancel()
	}
	delete(t.live, id)
	if t.perConn[e.conn]--; t.perConn[e.conn] <= 0 {
		delete(t.perConn, e.conn)
	}
}

// endConn stops the running tasks of a connection that ended ("" for all:
// the server is closing). Their results are kept until they expire, for
// nobody: the connection cannot come back.
func (t *tasks) endConn(conn string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.live {
		if conn == "" || e.conn == conn {
			if e.cancel != nil {
				e.cancel()
			} else {
				e.ended = true
			}
		}
	}
}

// owns reports whether a connection made a live task; for the transports
// that must not tell one connection of another's tasks.
func (t *tasks) owns(conn, id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.live[id]
	return e != nil && e.conn == conn
}

// cancelled is an OnTaskCancelled hook: it stops the task's call.
func (t *tasks) cancelled(_ context.Context, m mcpserver.TaskMetrics) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.live[m.TaskID]; e != nil {
		if e.cancel != nil {
			e.cancel()
		} else {
			e.ended = true
		}
	}
}

// run returns the context a call runs under: its own when it is a task
// (with a function to call when it ends), else ctx.
func (t *tasks) run(ctx context.Context) (context.Context, func()) {
	info := mcpserver.RequestProtocolInfoFromContext(ctx)
	if info == nil {
		return ctx, func() {}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pending[info]
	if p == nil {
		return ctx, func() {}
	}
	delete(t.pending, info)
	e := t.live[p.id]
	if e == nil {
		return ctx, func() {}
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if e.ended {
		cancel()
	}
	e.cancel = cancel
	return rctx, func() {
		cancel()
		t.mu.Lock()
		e.cancel = nil
		t.mu.Unlock()
	}
}
