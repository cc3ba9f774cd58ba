package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pybox/pybox/sandbox"
)

// BenchmarkCall compares a plain call through MCP with one that sends a
// 1 MiB CSV in and gets a chart and a CSV back, on the real engine:
//
//	go test -run ^$ -bench Call -benchtime 20x ./server
func BenchmarkCall(b *testing.B) {
	c := connect(b, realServer(b, sandbox.Options{}))
	csv := "x,y\n" + strings.Repeat("1.5,2.25\n", 1<<20/9)
	cases := []struct {
		name string
		args map[string]any
	}{
		{"plain", map[string]any{"code": "print(sum(range(1000)))"}},
		{"files-in-and-out", map[string]any{
			"code":  "data = open('/mnt/user-data/data.csv').read()\nopen('/mnt/outputs/copy.csv', 'w').write(data)\nimport base64\nopen('/mnt/outputs/chart.png', 'wb').write(base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==') * 1)\nprint(len(data))",
			"files": []any{map[string]any{"path": "data.csv", "content": csv}},
		}},
	}
	// A session's calls reuse one sandbox: the cost of a call there.
	req := mcp.CallToolRequest{}
	req.Params.Name = ToolName
	req.Params.Arguments = map[string]any{"code": "n = 0", "session_id": "new"}
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	var sid Output
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &sid)
	cases = append(cases, struct {
		name string
		args map[string]any
	}{"in-a-session", map[string]any{"code": "n += 1\nprint(sum(range(1000)))", "session_id": sid.SessionID}})
	filesArgs := map[string]any{"session_id": sid.SessionID}
	for k, v := range cases[1].args {
		filesArgs[k] = v
	}
	cases = append(cases, struct {
		name string
		args map[string]any
	}{"files-in-and-out-in-a-session", filesArgs})
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				req := mcp.CallToolRequest{}
				req.Params.Name = ToolName
				req.Params.Arguments = bc.args
				res, err := c.CallTool(context.Background(), req)
				if err != nil || res.IsError {
					b.Fatalf("call failed: %v %+v", err, res)
				}
			}
		})
	}
}
