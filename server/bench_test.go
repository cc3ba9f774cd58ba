package server

import (
	"context"
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
