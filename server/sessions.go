package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/rs/zerolog"

	"github.com/pybox/pybox/sandbox"
)

// SessionsToolName is the tool that lists and ends one's own sessions.
const SessionsToolName = "python_sessions"

// Session defaults.
const (
	DefaultMaxSessions   = 8
	DefaultSessionIdle   = 10 * time.Minute
	DefaultSessionMaxAge = time.Hour
)

// session is a live persistent sandbox and its owner.
type session struct {
	id       string
	owner    string // see ownerOf
	sb       *sandbox.Session
	created  time.Time
	lastUsed time.Time
	calls    int
	running  int
}

// registry holds the live sessions. Ids are 128 random bits; a session is
// found only by its owner.
type registry struct {
	mu     sync.Mutex
	m      map[string]*session
	max    int
	idle   time.Duration
	maxAge time.Duration
	log    zerolog.Logger
	stop   chan struct{}
	done   chan struct{}
}

func newRegistry(max int, idle, maxAge time.Duration, log zerolog.Logger) *registry {
	r := &registry{m: map[string]*session{}, max: max, idle: idle, maxAge: maxAge, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go r.sweeper()
	return r
}

type principalKey struct{}

// WithPrincipal marks a request as made by an authenticated principal (the
// name of the bearer token it carried). Where the protocol has no
// connection, the principal owns the sessions the request makes.
func WithPrincipal(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, principalKey{}, name)
}

// principalOf is the request's authenticated principal, "" for none.
func principalOf(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// Owner names who the sessions a request makes answer to; see ownerOf.
func Owner(ctx context.Context) string { return ownerOf(ctx) }

// ownerOf names who a request's sessions answer to:
//
//   - the MCP connection it came on ("conn:" and its session id): stdio,
//     SSE, and Streamable HTTP up to protocol 2025-11-25;
//   - where the protocol has no connection (2026-07-28), the authenticated
//     principal ("principal:" and its name);
//   - with neither, nobody: "" marks an anonymous session, which only the
//     holder of its id reaches, which no list shows and which "end all"
//     does not end.
func ownerOf(ctx context.Context) string {
	if cs := mcpserver.ClientSessionFromContext(ctx); cs != nil && cs.SessionID() != "" {
		return "conn:" + cs.SessionID()
	}
	if p, _ := ctx.Value(principalKey{}).(string); p != "" {
		return "principal:" + p
	}
	return ""
}

// connOwner is the owner of the sessions an MCP connection made.
func connOwner(mcpSession string) string {
	if mcpSession == "" {
		return "conn:?" // no connection: nothing of it to end
	}
	return "conn:" + mcpSession
}

// create starts a session for owner, within the cap.
func (r *registry) create(ctx context.Context, owner string, runner Runner) (*session, sandbox.Result) {
	r.mu.Lock()
	if len(r.m) >= r.max {
		r.mu.Unlock()
		return nil, sandbox.Result{ExitCode: sandbox.ExitNotRun, Error: sandbox.ErrTooManyRequests,
			Stderr: fmt.Sprintf("pybox: %d sessions are live, the most this server keeps; end one with the %s tool, or run without session_id.", r.max, SessionsToolName)}
	}
	// Hold a place while the container starts.
	id := sandbox.NewID()
	placeholder := &session{id: id, owner: owner, created: time.Now(), lastUsed: time.Now(), running: 1}
	r.m[id] = placeholder
	r.mu.Unlock()
	var sb *sandbox.Session
	var res sandbox.Result
	// A session owned by a connection lives and ends with it, in this
	// replica; one owned by a principal (or by its id's holder) is kept in
	// the cluster for every replica.
	if sr := shared(runner); sr != nil && !strings.HasPrefix(owner, "conn:") {
		sb, res = sr.StartSharedSession(ctx, id, owner)
	} else {
		sb, res = runner.StartSession(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb == nil {
		delete(r.m, id)
		return nil, res
	}
	placeholder.sb = sb
	r.log.Info().Str("session", id[:8]).Msg("session started")
	return placeholder, sandbox.Result{}
}

// acquire finds owner's session id and marks a call running in it.
func (r *registry) acquire(id, owner string) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.m[id]
	if s == nil || s.owner != owner || s.sb == nil {
		return nil
	}
	s.running++
	return s
}

// adopt finds a session another replica started, on a runner that shares
// them, and marks a call running in it when its owner is the caller.
func (r *registry) adopt(ctx context.Context, id, owner string, sr SharedRunner) *session {
	if sr == nil || id == "" || id == "new" {
		return nil
	}
	sb, podOwner := sr.FindSession(ctx, id)
	if sb == nil || podOwner != owner {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.m[id]; s != nil { // adopted meanwhile by another call
		if s.owner != owner || s.sb == nil {
			return nil
		}
		s.running++
		return s
	}
	s := &session{id: id, owner: owner, sb: sb, created: time.Now(), lastUsed: time.Now(), running: 1}
	r.m[id] = s
	r.log.Info().Str("session", id[:min(8, len(id))]).Msg("session found in the cluster")
	return s
}

// release ends a call in s; a session whose sandbox ended is dropped.
func (r *registry) release(s *session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.running--
	s.calls++
	s.lastUsed = time.Now()
	if over, _ := s.sb.Over(); over {
		delete(r.m, s.id)
	}
}

// end removes the sessions chosen by pick and closes their sandboxes.
func (r *registry) end(ctx context.Context, why string, pick func(*session) bool) []string {
	r.mu.Lock()
	var gone []*session
	for id, s := range r.m {
		if s.sb != nil && pick(s) {
			gone = append(gone, s)
			delete(r.m, id)
		}
	}
	r.mu.Unlock()
	var ids []string
	for _, s := range gone {
		s.sb.Close(ctx)
		r.log.Info().Str("session", s.id[:8]).Str("why", why).Msg("session ended")
		ids = append(ids, s.id)
	}
	sort.Strings(ids)
	return ids
}

func (r *registry) sweeper() {
	defer close(r.done)
	every := min(r.idle/4, 30*time.Second)
	every = max(every, 50*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		r.refreshShared()
		r.end(context.Background(), "idle or too old", func(s *session) bool {
			return s.running == 0 && (now.Sub(s.lastUsed) > r.idle || now.Sub(s.created) > r.maxAge)
		})
	}
}

// refreshShared takes a shared session's last use from the cluster, where
// every replica records its calls, so that no replica ends a session
// another one uses.
func (r *registry) refreshShared() {
	r.mu.Lock()
	var idle []*session
	for _, s := range r.m {
		if s.sb != nil && s.running == 0 && time.Since(s.lastUsed) > r.idle {
			idle = append(idle, s)
		}
	}
	r.mu.Unlock()
	for _, s := range idle {
		t, ok := s.sb.LastUsed(context.Background())
		if !ok {
			continue
		}
		r.mu.Lock()
		if t.After(s.lastUsed) {
			s.lastUsed = t
		}
		r.mu.Unlock()
	}
}

// close ends every session but the shared ones, which other replicas (or
// this one's successor) go on serving until they end or expire.
func (r *registry) close(ctx context.Context) {
	close(r.stop)
	<-r.done
	r.end(ctx, "the server is stopping", func(s *session) bool { return !s.sb.Shared() })
}

// sessionsTool lists and ends the calling connection's sessions.
func (h *handler) sessionsTool() mcp.Tool {
	t := mcp.NewToolWithRawSchema(SessionsToolName,
		`List your live Python sessions (started with run_python's session_id "new"), or end them: {"end": "<session_id>"} or {"end": "all"}. Sessions also end after `+h.opt.SessionIdle.String()+` idle.`,
		[]byte(`{"type": "object", "properties": {"end": {"type": "string", "description": "A session_id to end, or \"all\"."}}, "additionalProperties": false}`))
	t.RawOutputSchema = []byte(`{"type": "object", "properties": {
  "sessions": {"type": "array", "items": {"type": "object", "properties": {"session_id": {"type": "string"}, "age_seconds": {"type": "number"}, "idle_seconds": {"type": "number"}, "calls": {"type": "integer"}}, "required": ["session_id", "age_seconds", "idle_seconds", "calls"]}},
  "ended": {"type": "array", "items": {"type": "string"}},
  "error": {"type": "string"}
}, "required": ["sessions", "ended"]}`)
	return t
}

type sessionInfo struct {
	SessionID   string  `json:"session_id"`
	AgeSeconds  float64 `json:"age_seconds"`
	IdleSeconds float64 `json:"idle_seconds"`
	Calls       int     `json:"calls"`
}

type sessionsOutput struct {
	Sessions []sessionInfo `json:"sessions"`
	Ended    []string      `json:"ended"`
	Error    string        `json:"error,omitempty"`
}

func (h *handler) callSessions(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	owner := ownerOf(ctx)
	anonymous := owner == ""
	out := sessionsOutput{Sessions: []sessionInfo{}, Ended: []string{}}
	args, err := argsMap(req.GetRawArguments())
	if err != nil {
		out.Error = "invalid_input: " + err.Error()
	}
	for k := range args {
		if k != "end" {
			out.Error = fmt.Sprintf("invalid_input: unknown argument %q; the only one is \"end\"", k)
		}
	}
	if v, ok := args["end"]; ok && out.Error == "" {
		which, ok := v.(string)
		switch {
		case !ok:
			out.Error = `invalid_input: "end" must be a session_id or "all"`
		case which == "all":
			if !anonymous {
				out.Ended = h.sessions.end(ctx, "ended by its owner", func(s *session) bool { return s.owner == owner })
			}
		default:
			// Another replica's session of the caller's, on a cluster.
			if s := h.sessions.adopt(ctx, which, owner, shared(h.opt.Runner)); s != nil {
				h.sessions.release(s)
			}
			out.Ended = h.sessions.end(ctx, "ended by its owner", func(s *session) bool { return s.owner == owner && s.id == which })
			if len(out.Ended) == 0 {
				out.Error = "session_expired: no live session of yours has that id"
			}
		}
	}
	if out.Ended == nil {
		out.Ended = []string{}
	}
	h.sessions.mu.Lock()
	now := time.Now()
	for _, s := range h.sessions.m {
		if !anonymous && s.owner == owner && s.sb != nil {
			out.Sessions = append(out.Sessions, sessionInfo{SessionID: s.id, AgeSeconds: now.Sub(s.created).Seconds(), IdleSeconds: now.Sub(s.lastUsed).Seconds(), Calls: s.calls})
		}
	}
	h.sessions.mu.Unlock()
	sort.Slice(out.Sessions, func(i, j int) bool { return out.Sessions[i].SessionID < out.Sessions[j].SessionID })
	text := fmt.Sprintf("%d live sessions", len(out.Sessions))
	if anonymous {
		text += " listed: this request has neither a connection nor an authenticated principal, so no session is listed or ended as its own; a session_id you hold still ends it"
	}
	if len(out.Ended) > 0 {
		text += "; ended " + strings.Join(out.Ended, ", ")
	}
	if out.Error != "" {
		text += "; " + out.Error
	}
	r := mcp.NewToolResultStructured(out, text)
	r.IsError = out.Error != ""
	return r, nil
}
