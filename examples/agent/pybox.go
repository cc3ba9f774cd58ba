package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// pyboxRunner calls run_python on a pybox started over stdio.
type pyboxRunner struct{ c *client.Client }

func startPybox(ctx context.Context, binary string, env []string) (*pyboxRunner, error) {
	c, err := client.NewStdioMCPClient(binary, env)
	if err != nil {
		return nil, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "pybox-agent", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, err
	}
	return &pyboxRunner{c: c}, nil
}

func (p *pyboxRunner) Close() error { return p.c.Close() }

func (p *pyboxRunner) Run(ctx context.Context, code string) (string, Result, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = "run_python"
	req.Params.Arguments = map[string]any{"code": code}
	res, err := p.c.CallTool(ctx, req)
	if err != nil {
		return "", Result{}, err
	}
	var r Result
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return "", r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return "", r, fmt.Errorf("the tool's result: %w", err)
	}
	return string(b), r, nil
}
