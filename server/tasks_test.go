package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

type fakeConn string

func (fakeConn) Initialize()                                         {}
func (fakeConn) Initialized() bool                                   { return true }
func (fakeConn) NotificationChannel() chan<- mcp.JSONRPCNotification { return nil }
func (c fakeConn) SessionID() string                                 { return string(c) }

// onConn is a request's context on a connection ("" for none), as mcp-go
// makes it.
func onConn(conn string) context.Context {
	ctx := context.Background()
	if conn != "" {
		ctx = mcpserver.NewMCPServer("t", "1").WithContext(ctx, fakeConn(conn))
	}
	return mcpserver.WithRequestProtocolInfo(ctx, &mcpserver.RequestProtocolInfo{})
}

func msg(s string) json.RawMessage { return json.RawMessage(s) }

const taskCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"1"},"task":{}}}`

func TestTaskAdmission(t *testing.T) {
	tk := newTasks(3, 2, time.Minute)
	// A plain call needs no connection; a task does.
	if err := tk.admit(onConn(""), 1, msg(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"1"}}}`)); err != nil {
		t.Fatalf("a plain call without a connection: %v", err)
	}
	if err := tk.admit(onConn(""), 1, msg(taskCall)); err == nil || !strings.Contains(err.Error(), "needs a connection") {
		t.Fatalf("a task without a connection: %v", err)
	}
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel", "tasks/list"} {
		if err := tk.admit(onConn(""), 1, msg(`{"jsonrpc":"2.0","id":1,"method":"`+m+`","params":{"taskId":"x"}}`)); err == nil {
			t.Errorf("%s without a connection was admitted", m)
		}
	}
	// Per connection, then in all.
	tk.created(onConn("a"), mcpserver.TaskMetrics{TaskID: "t1", SessionID: "a"})
	tk.created(onConn("a"), mcpserver.TaskMetrics{TaskID: "t2", SessionID: "a"})
	if err := tk.admit(onConn("a"), 1, msg(taskCall)); err == nil || !strings.Contains(err.Error(), "--max-tasks-per-connection") {
		t.Fatalf("a third task of one connection: %v", err)
	}
	if err := tk.admit(onConn("b"), 1, msg(taskCall)); err != nil {
		t.Fatalf("another connection's first task: %v", err)
	}
	tk.created(onConn("b"), mcpserver.TaskMetrics{TaskID: "t3", SessionID: "b"})
	if err := tk.admit(onConn("c"), 1, msg(taskCall)); err == nil || !strings.Contains(err.Error(), "--max-tasks") {
		t.Fatalf("a task past the server's limit: %v", err)
	}
	// A task answers to its connection only.
	get := func(id string) json.RawMessage {
		return msg(`{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":"` + id + `"}}`)
	}
	if err := tk.admit(onConn("a"), 1, get("t1")); err != nil {
		t.Fatalf("the owner's tasks/result: %v", err)
	}
	if err := tk.admit(onConn("b"), 1, get("t1")); err == nil || err.Error() != "task not found" {
		t.Fatalf("another connection's tasks/result: %v", err)
	}
	if !tk.owns("a", "t1") || tk.owns("b", "t1") || tk.owns("a", "nope") {
		t.Fatal("owns")
	}
	// Expired tasks free their places.
	tk.forget("t1")
	if err := tk.admit(onConn("a"), 1, msg(taskCall)); err != nil {
		t.Fatalf("a task once another expired: %v", err)
	}
}

func TestTaskRunsOnItsOwnContext(t *testing.T) {
	h := &handler{opt: Options{MaxTimeout: 300 * time.Second, DefaultTimeout: 30 * time.Second}}
	tk := newTasks(0, 0, time.Minute)
	reqCtx, endRequest := context.WithCancel(onConn("a"))
	req := &mcp.CallToolRequest{}
	req.Params.Name = ToolName
	req.Params.Arguments = map[string]any{"code": "1", "timeout": 10.0}
	req.Params.Task = &mcp.TaskParams{}
	tk.setTTL(h)(reqCtx, 1, req)
	if req.Params.Task.TTL == nil || *req.Params.Task.TTL != (10*time.Second+taskSlack+time.Minute).Milliseconds() {
		t.Fatalf("ttl %v", *req.Params.Task.TTL)
	}
	tk.created(reqCtx, mcpserver.TaskMetrics{TaskID: "t1", SessionID: "a"})
	ctx, finished := tk.run(reqCtx)
	defer finished()
	endRequest() // mcp-go ends the request once the task is made
	if ctx.Err() != nil {
		t.Fatal("the task's call ended with its request")
	}
	tk.cancelled(context.Background(), mcpserver.TaskMetrics{TaskID: "t1"})
	if ctx.Err() == nil {
		t.Fatal("tasks/cancel did not end the call")
	}

	// A plain call runs on its request's context.
	plain := onConn("a")
	if ctx, _ := tk.run(plain); ctx != plain {
		t.Fatal("a plain call got another context")
	}

	// The connection's end stops its tasks' calls.
	reqCtx2 := onConn("b")
	req.Params.Task = &mcp.TaskParams{}
	tk.setTTL(h)(reqCtx2, 2, req)
	tk.created(reqCtx2, mcpserver.TaskMetrics{TaskID: "t2", SessionID: "b"})
	ctx2, finished2 := tk.run(reqCtx2)
	defer finished2()
	tk.endConn("a")
	if ctx2.Err() != nil {
		t.Fatal("another connection's end stopped the call")
	}
	tk.endConn("b")
	if ctx2.Err() == nil {
		t.Fatal("the connection's end did not stop its task's call")
	}
}
