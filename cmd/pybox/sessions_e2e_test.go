package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pybox/pybox/internal/testenv"
)

func httpClient(t *testing.T, addr, token string) *mcpclient.Client {
	t.Helper()
	c, err := mcpclient.NewStreamableHttpClient("http://"+addr+"/mcp", transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	initClient(t, c)
	return c
}

// mcpInit is an initialize request of a protocol version with sessions, so
// that a connection has an identity.
func mcpInit() mcp.InitializeRequest {
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = "2025-06-18"
	init.Params.ClientInfo = mcp.Implementation{Name: "e2e", Version: "1"}
	return init
}

func runVia(t *testing.T, c *mcpclient.Client, args map[string]any) (map[string]any, bool) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = "run_python"
	req.Params.Arguments = args
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	return out, res.IsError
}

// TestSessionBelongsToItsConnection: a session id from one Streamable HTTP
// connection is refused on another; closing the first ends its session.
func TestSessionBelongsToItsConnection(t *testing.T) {
	testenv.Engine(t, image())
	const token = "sessions-token-0123456789"
	addr := startHTTP(t, "http", token)
	a := httpClient(t, addr, token)
	b := httpClient(t, addr, token)
	defer b.Close()
	out, _ := runVia(t, a, map[string]any{"code": "secret_state = 1", "session_id": "new"})
	id, _ := out["session_id"].(string)
	if len(id) != 32 {
		t.Fatalf("no session id: %v", out)
	}
	other, isErr := runVia(t, b, map[string]any{"code": "print(secret_state)", "session_id": id})
	if other["error"] != "session_expired" || !isErr {
		t.Errorf("another connection used the session: %v", other)
	}
	mine, _ := runVia(t, a, map[string]any{"code": "print(secret_state)", "session_id": id})
	if mine["stdout"] != "1\n" {
		t.Errorf("the owner's call: %v", mine)
	}
	before := len(containersOf(t, ""))
	// Ending the MCP session (a DELETE, as the client's close sends; mcp-go's
	// own client leaves its custom headers off it, so it is sent here) ends
	// the Python session.
	sid := a.GetTransport().(*transport.StreamableHTTP).GetSessionId()
	req, _ := http.NewRequest(http.MethodDelete, "http://"+addr+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitFor(t, "the session's container to go", 15*time.Second, func() bool { return len(containersOf(t, "")) < before })
	again, _ := runVia(t, b, map[string]any{"code": "1", "session_id": id})
	if again["error"] != "session_expired" {
		t.Errorf("after its connection ended: %v", again)
	}
}

// TestSessionsEndWithTheServer: no labelled container outlives a server
// that had live sessions.
func TestSessionsEndWithTheServer(t *testing.T) {
	testenv.Engine(t, image())
	p := startProc(t, nil)
	for range 2 {
		a := p.runPython(map[string]any{"code": "x = 1", "session_id": "new"}, 60*time.Second)
		if a.Result.StructuredContent["session_id"] == nil {
			t.Fatalf("no session: %v", a.Result.StructuredContent)
		}
	}
	if n := len(containersOf(t, p.ownerPrefix())); n != 2 {
		t.Fatalf("%d session containers; want 2", n)
	}
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(40 * time.Second):
		t.Fatal("the server did not exit")
	}
	if left := containersOf(t, p.ownerPrefix()); len(left) > 0 {
		t.Errorf("containers left after the server exited: %v", left)
	}
}
