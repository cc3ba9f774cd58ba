package server

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/pybox/pybox/sandbox"
)

// reporter sends a call's progress reports to the client that asked for
// them with a progressToken: notifications/progress whose progress is the
// seconds since the call arrived, whose total is its timeout, and whose
// message is the newest output (redacted by the sandbox) or what the call
// is doing.
type reporter struct {
	ctx   context.Context
	token mcp.ProgressToken
	total float64

	mu   sync.Mutex
	last float64   // progress must grow with each notification
	at   time.Time // when the last one was sent
	sent int
}

// newReporter returns a reporter for a request that carries a progress
// token, or nil.
func newReporter(ctx context.Context, req mcp.CallToolRequest, timeout time.Duration) *reporter {
	if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return nil
	}
	return &reporter{ctx: ctx, token: req.Params.Meta.ProgressToken, total: timeout.Seconds()}
}

// send is the sandbox's Progress callback.
func (r *reporter) send(p sandbox.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	progress := math.Round(p.Elapsed.Seconds()*1000) / 1000
	if progress <= r.last {
		progress = r.last + 0.001
	}
	r.last = progress
	srv := mcpserver.ServerFromContext(r.ctx)
	if srv == nil {
		return
	}
	err := srv.SendNotificationToClient(r.ctx, string(mcp.MethodNotificationProgress), map[string]any{
		"progressToken": r.token,
		"progress":      progress,
		"total":         r.total,
		"message":       p.Message(),
	})
	if err == nil {
		r.at = time.Now()
		r.sent++
	}
}

// settle lets the last notification leave before the result does: the
// transports write notifications and responses from different goroutines.
func (r *reporter) settle() {
	if r == nil {
		return
	}
	r.mu.Lock()
	at := r.at
	r.mu.Unlock()
	if wait := 50*time.Millisecond - time.Since(at); wait > 0 {
		time.Sleep(wait)
	}
}

// callback is the sandbox's Progress field: nil for no reporter.
func (r *reporter) callback() func(sandbox.Progress) {
	if r == nil {
		return nil
	}
	return r.send
}
