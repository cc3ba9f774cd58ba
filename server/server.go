// Package server exposes the sandbox to MCP clients as the run_python tool.
//
// It owns the tool's schemas, checks each call's input, and shapes every
// outcome (a clean run, a crash, a timeout, a dead engine, bad input, a
// panic in the server itself) into the same four fields: stdout, stderr,
// exit_code and execution_time. A call never ends as a JSON-RPC error; a
// failure to run goes back in-band with isError, so the model can correct
// itself.
package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/rs/zerolog"

	"github.com/pybox/pybox/redact"
	"github.com/pybox/pybox/sandbox"
)

// ToolName is the name of the tool.
const ToolName = "run_python"

// Runner runs code: one call in a fresh sandbox, or a persistent session.
// [sandbox.Sandbox] is the real one.
type Runner interface {
	Run(ctx context.Context, req sandbox.Request) sandbox.Result
	// StartSession returns a session, or nil and a Result saying why not.
	StartSession(ctx context.Context) (*sandbox.Session, sandbox.Result)
}

// SharedRunner keeps sessions that every replica of pybox on the same
// cluster finds by id ([sandbox.Sandbox] on Kubernetes): replicas then
// need no sticky routing.
type SharedRunner interface {
	SharedSessions() bool
	StartSharedSession(ctx context.Context, id, owner string) (*sandbox.Session, sandbox.Result)
	FindSession(ctx context.Context, id string) (*sandbox.Session, string)
}

// shared returns the runner's shared sessions, or nil.
func shared(r Runner) SharedRunner {
	if sr, ok := r.(SharedRunner); ok && sr.SharedSessions() {
		return sr
	}
	return nil
}

// Options configures [New].
type Options struct {
	// Runner runs the code; required.
	Runner Runner
	// Redactor cleans the server's own messages and its logs; nil redacts
	// nothing. What the code made (streams, output files' names and
	// contents) comes redacted from the Runner, within the call's budget:
	// give the sandbox the same redactor (sandbox.Options.Redact).
	Redactor *redact.Redactor
	// Logger receives one info line per call.
	Logger zerolog.Logger
	// DefaultTimeout applies when a call gives none; 0 means 30 s.
	DefaultTimeout time.Duration
	// MaxTimeout is the largest timeout a call may ask for; 0 means 300 s.
	MaxTimeout time.Duration
	// Version is the server's version, told to clients.
	Version string
	// Limits describe the sandbox for the tool's description.
	Limits Limits
	// MaxSessions caps the live sessions; 0 means 8.
	MaxSessions int
	// SessionIdle ends a session unused this long; 0 means 10 minutes.
	SessionIdle time.Duration
	// SessionMaxAge ends a session this old; 0 means an hour.
	SessionMaxAge time.Duration
	// MaxTasks caps the tasks kept (running, or done until they expire);
	// 0 means DefaultMaxTasks.
	MaxTasks int
	// MaxTasksPerConnection caps those of one connection; 0 means
	// DefaultMaxTasksPerConnection.
	MaxTasksPerConnection int
	// TaskRetention is how long a task's result is kept after the call's
	// time is up; 0 means DefaultTaskRetention.
	TaskRetention time.Duration
	// OnCall, when set, is told of each run_python call once it is
	// answered: for metrics, the audit log and benchmarks. It must not
	// block.
	OnCall func(Call)
}

// Call is what OnCall is told of one run_python call. It holds no code,
// no output and no secret: sizes, a digest of the code, who called, how it
// ended and where its time went.
type Call struct {
	// ID is the call's id, as in the server's log and the container's
	// label.
	ID string
	// Start is when the handler began.
	Start time.Time
	// MCPSession is the MCP session the call came on ("" on a transport
	// without one).
	MCPSession string
	// Principal is the authenticated token's name, "" without tokens.
	Principal string
	// CodeSHA256 is the hex SHA-256 of the code; "" when the input did
	// not parse.
	CodeSHA256 string
	// CodeBytes is the code's size, InputFiles and InputBytes the input
	// files'.
	CodeBytes, InputFiles int
	InputBytes            int64
	// InSession is true for a call in a Python session.
	InSession bool
	// StdoutBytes and StderrBytes count what the code wrote, kept or not;
	// OutputFiles and OutputBytes what came back from /mnt/outputs.
	StdoutBytes, StderrBytes int64
	OutputFiles              int
	OutputBytes              int64
	// RedactedBytes is what went through redaction: the streams as kept,
	// and the output files.
	RedactedBytes int64
	// ExitCode, Error and Truncated are the result's.
	ExitCode  int
	Error     string
	Truncated bool
	// ExecutionTime is the code's run, as the result says.
	ExecutionTime time.Duration
	// Timing is where the call's time went.
	Timing Timing
}

// Timing is where one run_python call's time went in the server.
type Timing struct {
	// Decode is parsing and checking the call's arguments; Encode is
	// shaping the result (its JSON text and file blocks). What the MCP
	// library and the transport add lies outside Handler.
	Decode, Encode time.Duration
	// Handler is the whole tool handler, the sandbox's part included.
	Handler time.Duration
	// Error is the call's error kind, "" for none.
	Error string
	// Sandbox is the sandbox's part.
	Sandbox sandbox.Timing
}

// Limits are the sandbox's limits as the tool's description states them.
type Limits struct {
	MemoryMiB   int64
	CPUs        float64
	OutputBytes int
	Network     bool
}

// Output is the tool's structured result: the contract's fields.
type Output struct {
	Stdout        string     `json:"stdout"`
	Stderr        string     `json:"stderr"`
	ExitCode      int        `json:"exit_code"`
	ExecutionTime float64    `json:"execution_time"`
	Error         string     `json:"error,omitempty"`
	Truncated     bool       `json:"truncated,omitempty"`
	Files         []FileInfo `json:"files,omitempty"`
	SessionID     string     `json:"session_id,omitempty"`
}

// Server is the MCP server with its tools and live sessions.
type Server struct {
	mcp *mcpserver.MCPServer
	h   *handler
}

// MCP returns the server to serve over a transport.
func (s *Server) MCP() *mcpserver.MCPServer { return s.mcp }

// LiveSessions is the number of Python sessions this server holds now,
// those starting included.
func (s *Server) LiveSessions() int {
	r := s.h.sessions
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// Close ends every session and stops every task's call.
func (s *Server) Close(ctx context.Context) {
	s.h.tasks.endConn("")
	s.h.sessions.close(ctx)
}

// OwnsTask reports whether a task belongs to an MCP session, for a
// transport that must not show one connection another's task events.
func (s *Server) OwnsTask(mcpSession, taskID string) bool {
	return mcpSession != "" && s.h.tasks.owns(mcpSession, taskID)
}

// EndSessionsOf ends the Python sessions of one MCP session, for a
// transport that sees it end (an HTTP DELETE of its Mcp-Session-Id).
func (s *Server) EndSessionsOf(ctx context.Context, mcpSession string) {
	if mcpSession == "" {
		return
	}
	owner := connOwner(mcpSession)
	s.h.sessions.end(ctx, "its connection closed", func(se *session) bool { return se.owner == owner })
	s.h.tasks.endConn(mcpSession)
}

// New returns an MCP server with the run_python and python_sessions tools.
// Close it to end its sessions.
func New(opt Options) *Server {
	if opt.DefaultTimeout <= 0 {
		opt.DefaultTimeout = sandbox.DefaultTimeout
	}
	if opt.MaxTimeout <= 0 {
		opt.MaxTimeout = 300 * time.Second
	}
	if opt.MaxTimeout < opt.DefaultTimeout {
		opt.MaxTimeout = opt.DefaultTimeout
	}
	if opt.Version == "" {
		opt.Version = "dev"
	}
	if opt.MaxSessions <= 0 {
		opt.MaxSessions = DefaultMaxSessions
	}
	if opt.SessionIdle <= 0 {
		opt.SessionIdle = DefaultSessionIdle
	}
	if opt.SessionMaxAge <= 0 {
		opt.SessionMaxAge = DefaultSessionMaxAge
	}
	h := &handler{opt: opt, sessions: newRegistry(opt.MaxSessions, opt.SessionIdle, opt.SessionMaxAge, opt.Logger),
		tasks: newTasks(opt.MaxTasks, opt.MaxTasksPerConnection, opt.TaskRetention)}
	hooks := &mcpserver.Hooks{}
	hooks.AddOnUnregisterSession(func(ctx context.Context, cs mcpserver.ClientSession) {
		owner := connOwner(cs.SessionID())
		h.sessions.end(context.WithoutCancel(ctx), "its connection closed", func(s *session) bool { return s.owner == owner })
		if cs.SessionID() != "" {
			h.tasks.endConn(cs.SessionID())
		}
	})
	hooks.AddOnRequestInitialization(h.tasks.admit)
	hooks.AddBeforeCallTool(h.tasks.setTTL(h))
	taskHooks := &mcpserver.TaskHooks{}
	taskHooks.AddOnTaskCreated(h.tasks.created)
	taskHooks.AddOnTaskCancelled(h.tasks.cancelled)
	s := mcpserver.NewMCPServer("pybox", opt.Version,
		mcpserver.WithHooks(hooks),
		mcpserver.WithToolCapabilities(false),
		mcpserver.WithTaskCapabilities(true, true, true),
		mcpserver.WithTaskHooks(taskHooks),
		mcpserver.WithMaxConcurrentTasks(h.tasks.max),
		mcpserver.WithInstructions("pybox runs Python code in a throwaway, locked-down sandbox with the scientific stack installed. Use run_python to compute exact numbers, analyse data, make charts and check claims; read exit_code and stderr and fix the code when it fails."),
	)
	s.AddTool(h.tool(), h.call)
	s.AddTool(h.sessionsTool(), h.callSessions)
	return &Server{mcp: s, h: h}
}

type handler struct {
	opt      Options
	sessions *registry
	tasks    *tasks
}

func (h *handler) tool() mcp.Tool {
	t := mcp.NewToolWithRawSchema(ToolName, description(h.opt), inputSchema(h.opt))
	t.RawOutputSchema = outputSchema
	t.Annotations = mcp.ToolAnnotation{
		Title:           "Run Python in a sandbox",
		ReadOnlyHint:    mcp.ToBoolPtr(true),
		DestructiveHint: mcp.ToBoolPtr(false),
		IdempotentHint:  mcp.ToBoolPtr(false),
		OpenWorldHint:   mcp.ToBoolPtr(h.opt.Limits.Network),
	}
	// A client may run it as a task, to poll for a long call's result.
	t.Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}
	return t
}

// call is the tool handler. Whatever happens inside, including a panic, it
// returns the four fields and no Go error.
func (h *handler) call(ctx context.Context, req mcp.CallToolRequest) (result *mcp.CallToolResult, _ error) {
	ctx, finished := h.tasks.run(ctx) // a task's call runs on its own
	defer finished()
	callID := sandbox.NewID()[:16]
	start := time.Now()
	var out Output
	var cause error
	var tm Timing
	rec := Call{ID: callID, Start: start, Principal: principalOf(ctx)}
	if cs := mcpserver.ClientSessionFromContext(ctx); cs != nil {
		rec.MCPSession = cs.SessionID()
	}
	defer func() {
		if p := recover(); p != nil {
			h.opt.Logger.Error().Str("call", callID).
				Str("panic", h.opt.Redactor.String(fmt.Sprint(p))).
				Str("stack", string(debug.Stack())).Msg("panic in run_python; answered with sandbox_unavailable")
			out = Output{
				Stderr:   "pybox: an internal error stopped this call (it was logged). The code may not have run; try again.",
				ExitCode: sandbox.ExitInternal,
				Error:    string(sandbox.ErrSandboxUnavailable),
			}
			result = h.result(out)
		}
		ev := h.opt.Logger.Info()
		if out.Error == string(sandbox.ErrSandboxUnavailable) {
			ev = h.opt.Logger.Warn()
		}
		ev = ev.Str("call", callID).
			Dur("duration", time.Since(start)).
			Float64("execution_time", out.ExecutionTime).
			Int("exit_code", out.ExitCode).
			Int("stdout_bytes", len(out.Stdout)).
			Int("stderr_bytes", len(out.Stderr)).
			Bool("truncated", out.Truncated).
			Int("files", len(out.Files)).
			Str("error", out.Error)
		if cause != nil {
			ev = ev.Str("cause", h.opt.Redactor.String(cause.Error()))
		}
		ev.Msg(ToolName)
		if h.opt.OnCall != nil {
			tm.Handler, tm.Error = time.Since(start), out.Error
			rec.ExitCode, rec.Error, rec.Truncated, rec.Timing = out.ExitCode, out.Error, out.Truncated, tm
			h.opt.OnCall(rec)
		}
	}()

	in, err := parseInput(req.GetRawArguments(), h.opt)
	tm.Decode = time.Since(start)
	if err != nil {
		out = Output{
			Stderr:   "pybox: invalid input: " + err.Error(),
			ExitCode: sandbox.ExitNotRun,
			Error:    string(sandbox.ErrInvalidInput),
		}
		return h.result(out), nil
	}
	if h.opt.Logger.Debug().Enabled() {
		h.opt.Logger.Debug().Str("call", callID).Str("code", h.opt.Redactor.String(in.Code)).Msg("run_python code")
	}
	if h.opt.OnCall != nil {
		sum := sha256.Sum256([]byte(in.Code))
		rec.CodeSHA256, rec.CodeBytes, rec.InputFiles, rec.InSession = hex.EncodeToString(sum[:]), len(in.Code), len(in.Files), in.Session != ""
		for _, f := range in.Files {
			rec.InputBytes += int64(len(f.Data))
		}
	}
	rep := newReporter(ctx, req, in.Timeout)
	defer rep.settle()
	sreq := sandbox.Request{Code: in.Code, Timeout: in.Timeout, CallID: callID, Files: in.Files, Progress: rep.callback()}
	var res sandbox.Result
	var sessionID string
	if in.Session == "" {
		res = h.opt.Runner.Run(ctx, sreq)
	} else {
		res, sessionID = h.runInSession(ctx, in.Session, sreq)
	}
	cause = res.Cause
	rec.StdoutBytes, rec.StderrBytes, rec.OutputFiles, rec.ExecutionTime = res.StdoutBytes, res.StderrBytes, len(res.Files), res.Duration
	for _, f := range res.Files {
		rec.OutputBytes += int64(len(f.Data))
	}
	rec.RedactedBytes = int64(len(res.Stdout)+len(res.Stderr)) + rec.OutputBytes
	encoding := time.Now()
	out = FromResult(res)
	out.SessionID = sessionID
	content, infos := fileContents(res.Files)
	out.Files = infos
	r := h.result(out)
	r.Content = append(r.Content, content...)
	tm.Encode, tm.Sandbox = time.Since(encoding), res.Timing
	return r, nil
}

// runInSession runs a call in the caller's session, a new one for "new",
// and returns the session's id unless no session served the call.
func (h *handler) runInSession(ctx context.Context, id string, req sandbox.Request) (sandbox.Result, string) {
	owner := ownerOf(ctx)
	var s *session
	if id == "new" {
		// The session's start counts against the call's timeout too.
		start := time.Now()
		sctx, cancel := context.WithTimeout(ctx, req.Timeout)
		var res sandbox.Result
		s, res = h.sessions.create(sctx, owner, h.opt.Runner)
		cancel()
		if s == nil {
			if ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
				res.Error = sandbox.ErrSandboxUnavailable
				res.Stderr = "pybox: the session's sandbox did not start within the call's timeout, so the code did not run. Try again, or with a longer timeout.\n"
			}
			return res, ""
		}
		req.Timeout = max(req.Timeout-time.Since(start), time.Millisecond)
	} else if s = h.sessions.acquire(id, owner); s == nil {
		s = h.sessions.adopt(ctx, id, owner, shared(h.opt.Runner))
	}
	if s == nil {
		return sandbox.Result{ExitCode: sandbox.ExitNotRun, Error: sandbox.ErrSessionExpired,
			Stderr: "pybox: no live session of yours has this session_id (it ended, expired, or belongs to another connection); start one with session_id \"new\"."}, ""
	}
	defer h.sessions.release(s)
	res := s.sb.Run(ctx, req)
	if res.Error == sandbox.ErrSessionExpired {
		return res, ""
	}
	return res, s.id
}

// FromResult shapes a sandbox result into the tool's output. Its streams
// are the sandbox's, redacted there.
func FromResult(res sandbox.Result) Output {
	return Output{
		Stdout:        res.Stdout,
		Stderr:        res.Stderr,
		ExitCode:      res.ExitCode,
		ExecutionTime: roundSeconds(res.Duration),
		Error:         string(res.Error),
		Truncated:     res.Truncated,
	}
}

// roundSeconds gives seconds with microsecond precision, never zero for a
// run that happened.
func roundSeconds(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	s := float64(d.Microseconds()) / 1e6
	if s == 0 {
		s = 1e-6
	}
	return s
}

// isErrorKinds are the kinds meaning the code could not be run.
var isErrorKinds = map[string]bool{
	string(sandbox.ErrInvalidInput):       true,
	string(sandbox.ErrSandboxUnavailable): true,
	string(sandbox.ErrTooManyRequests):    true,
	string(sandbox.ErrSessionExpired):     true,
	string(sandbox.ErrCancelled):          true,
}

func (h *handler) result(out Output) *mcp.CallToolResult {
	text, err := json.Marshal(out)
	if err != nil {
		// Output holds only strings and numbers; this cannot happen.
		text = []byte(`{"stdout":"","stderr":"pybox: could not encode the result","exit_code":1,"execution_time":0}`)
	}
	r := mcp.NewToolResultStructured(out, string(text))
	r.IsError = isErrorKinds[out.Error]
	return r
}
