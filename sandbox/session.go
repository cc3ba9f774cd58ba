package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// LabelSession marks a session's container.
const LabelSession = "pybox.session"

// sessionGrace is how long an interrupted call may take to stop before its
// session is ended.
const sessionGrace = 2 * time.Second

// Session is a persistent sandbox: one container whose Python process runs
// call after call, keeping variables, imports and files. It serves one
// call at a time and keeps every per-call limit of a fresh sandbox.
type Session struct {
	s      *Sandbox
	id     string // the container's
	st     stream
	dm     *demux
	copied chan error

	mu     sync.Mutex // one call at a time
	over   bool
	reason string
}

// errSessionOver means the session's container has ended.
var errSessionOver = errors.New("the session has ended")

// StartSession starts a persistent sandbox. On failure the Result says why
// in the usual way and the Session is nil.
func (s *Sandbox) StartSession(ctx context.Context) (*Session, Result) {
	select {
	case <-s.stop:
		return nil, failure(ErrCancelled, errClosed, "pybox: the server is shutting down.")
	default:
	}
	spec := s.containerSpec(NewID())
	spec.Env = append(spec.Env, "PYBOX_SESSION=1")
	spec.Labels[LabelSession] = "true"
	cctx, cancel := context.WithTimeout(ctx, engineCallTimeout)
	defer cancel()
	id, err := s.eng.Create(cctx, spec)
	if err != nil {
		return nil, s.engineFailure(ctx, err)
	}
	s.track(id)
	fail := func(r Result) (*Session, Result) {
		s.remove(ctx, id)
		return nil, r
	}
	st, dm, copied, err := s.launch(cctx, id)
	if err != nil {
		return fail(s.engineFailure(ctx, err))
	}
	select {
	case <-dm.ready:
	case <-copied:
		return fail(failure(ErrSandboxUnavailable, errSessionOver, "pybox: the session's sandbox stopped as it started."))
	case <-cctx.Done():
		st.Close()
		return fail(s.engineFailure(ctx, cctx.Err()))
	}
	return &Session{s: s, id: id, st: st, dm: dm, copied: copied}, Result{}
}

// Over reports whether the session has ended, and why.
func (se *Session) Over() (bool, string) {
	se.mu.Lock()
	defer se.mu.Unlock()
	return se.over, se.reason
}

// Run runs one call in the session. The session ends, and the Result says
// so, when the code's process dies (a memory kill, os._exit), or when a
// timeout's interrupt does not stop the code within a short grace; later
// calls then get [ErrSessionExpired].
func (se *Session) Run(ctx context.Context, req Request) Result {
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.over {
		return failure(ErrSessionExpired, errSessionOver, "pybox: this session has ended ("+se.reason+"); start a new one with session_id \"new\".")
	}
	s := se.s
	if req.Timeout <= 0 {
		req.Timeout = DefaultTimeout
	}
	if err := s.checkFiles(req.Files); err != nil {
		return failure(ErrInvalidInput, err, "pybox: invalid input: "+err.Error())
	}
	if err := s.lim.acquire(ctx, s.stop); err != nil {
		if errors.Is(err, errBusy) {
			return failure(ErrTooManyRequests, err, "pybox: too many calls at once; try again shortly.")
		}
		return failure(ErrCancelled, err, "pybox: the call was cancelled before it ran.")
	}
	defer s.lim.release()
	s.runs.Add(1)
	defer s.runs.Done()

	payload, err := encodeRequest(req)
	if err != nil {
		return failure(ErrInvalidInput, err, "pybox: the code could not be encoded: "+err.Error())
	}
	handover := time.Now()
	if _, err := se.st.Stdin().Write(payload); err != nil {
		se.end(ctx, "its sandbox stopped")
		return failure(ErrSessionExpired, err, "pybox: this session has ended (its sandbox stopped); start a new one with session_id \"new\".")
	}

	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	var res Result
	var call *callOut
	interrupted := ""
	select {
	case call = <-se.dm.done:
	case <-se.copied:
	case <-timer.C:
		interrupted = "timeout"
	case <-ctx.Done():
		interrupted = "cancelled"
	case <-s.stop:
		interrupted = "cancelled"
	}
	res.Duration = time.Since(handover)
	if interrupted != "" {
		// As Ctrl-C would: the code gets KeyboardInterrupt and a grace to stop.
		se.st.Stdin().Write([]byte(`{"op": "interrupt"}` + "\n"))
		select {
		case call = <-se.dm.done:
		case <-se.copied:
		case <-time.After(sessionGrace):
		}
	}
	if call == nil {
		call = se.dm.current()
	}
	s.collect(call, &res)
	noteFiles(&res)
	finished := call.trailer != nil && call.stderrDone
	if finished && call.trailer.ExitCode != nil {
		res.ExitCode = *call.trailer.ExitCode
	}
	switch {
	case interrupted == "timeout":
		res.ExitCode, res.Error = ExitTimeout, ErrTimeout
		if finished && !call.trailer.SessionOver {
			res.Stderr = appendNote(res.Stderr, fmt.Sprintf("pybox: the code was interrupted after its %s timeout, as Ctrl-C would; the session goes on.", req.Timeout))
			return res
		}
		se.end(ctx, "the code did not stop when interrupted after its timeout")
		res.Stderr = appendNote(res.Stderr, fmt.Sprintf("pybox: the code was stopped after its %s timeout and did not recover when interrupted, so the session was ended.", req.Timeout))
		return res
	case interrupted == "cancelled":
		res.ExitCode, res.Error = ExitNotRun, ErrCancelled
		if !finished || call.trailer.SessionOver {
			se.end(ctx, "a cancelled call did not stop")
		}
		return res
	case finished && !call.trailer.SessionOver:
		return res
	}
	// The worker or the whole container died.
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineCallTimeout)
	defer cancel()
	select {
	case <-se.copied:
	case <-time.After(killGrace):
	}
	state, err := s.eng.Inspect(kctx, se.id)
	if finished && call.trailer.memoryKilled() || err == nil && (state.OOMKilled || res.ExitCode == ExitKilled && s.opt.Runtime == "runsc") {
		res.ExitCode, res.Error = ExitKilled, ErrMemoryLimit
		se.end(ctx, "its code was killed for memory")
		res.Stderr = appendNote(res.Stderr, fmt.Sprintf("pybox: the code was killed for using more than its %d MiB memory limit; the session has ended.", s.opt.MemoryBytes>>20))
		return res
	}
	if !finished && err == nil {
		res.ExitCode = state.ExitCode
	}
	se.end(ctx, "its Python process exited")
	res.Stderr = appendNote(res.Stderr, "pybox: the session's Python process exited, so the session has ended.")
	return res
}

// end removes the session's container; later calls get session_expired.
func (se *Session) end(ctx context.Context, reason string) {
	if se.over {
		return
	}
	se.over, se.reason = true, reason
	se.st.Close()
	se.s.remove(ctx, se.id)
}

// Close ends the session and removes its container.
func (se *Session) Close(ctx context.Context) {
	se.mu.Lock()
	defer se.mu.Unlock()
	se.end(ctx, "it was closed")
}
