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
// session's Python process is restarted.
const sessionGrace = 2 * time.Second

// Session is a persistent sandbox: one container whose Python process runs
// call after call, keeping variables, imports and files. Its calls take
// the same path as any other ([Sandbox.Run]) and keep every per-call
// limit; they run one at a time, and a call's wait for the one before
// counts against its timeout.
type Session struct {
	s    *Sandbox
	b    *box
	turn chan struct{} // holds a token while no call runs

	mu     sync.Mutex
	over   bool
	reason string
}

// errSessionOver means the session's container has ended.
var errSessionOver = errors.New("the session has ended")

// StartSession starts a persistent sandbox. On failure the Result says why
// in the usual way and the Session is nil.
func (s *Sandbox) StartSession(ctx context.Context) (*Session, Result) {
	if !s.work.enter() {
		return nil, failure(ErrCancelled, errClosed, "pybox: the server is shutting down.")
	}
	defer s.work.leave()
	deadline := time.Now().Add(engineCallTimeout)
	b, fail := s.startBox(ctx, modeSession, NewID(), false, deadline, s.opt.SessionMaxAge)
	if fail != nil {
		return nil, s.said(*fail)
	}
	if err := s.waitReady(ctx, b, deadline); err != nil {
		s.destroy(ctx, b)
		if ctx.Err() != nil || errors.Is(err, errClosed) {
			return nil, failure(ErrCancelled, err, "pybox: the session was cancelled as it started.")
		}
		return nil, s.said(failure(ErrSandboxUnavailable, err, "pybox: the session's sandbox did not start: "+err.Error()))
	}
	se := &Session{s: s, b: b, turn: make(chan struct{}, 1)}
	se.turn <- struct{}{}
	return se, Result{}
}

// Run runs one call in the session. When the code's Python process dies
// (os._exit, a memory kill) or does not stop when interrupted after its
// timeout, it is restarted, as a notebook restarts its kernel, and the
// Result says so; the session ends only when its sandbox does. Calls of an
// ended session get [ErrSessionExpired].
func (se *Session) Run(ctx context.Context, req Request) Result {
	return se.s.do(ctx, req, se)
}

// take waits for the session's turn until the call's deadline.
func (se *Session) take(ctx context.Context, stop <-chan struct{}, deadline time.Time) (Result, bool) {
	if over, why := se.Over(); over {
		return expired(why), false
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-se.turn:
	case <-t.C:
		return failure(ErrTooManyRequests, errDeadline, "pybox: the session was busy with an earlier call for this call's whole timeout, so the code did not run. Wait for that call, or interrupt it by its own timeout."), false
	case <-ctx.Done():
		return failure(ErrCancelled, ctx.Err(), "pybox: the call was cancelled before it ran."), false
	case <-stop:
		return failure(ErrCancelled, errClosed, "pybox: the server is shutting down; the code did not run."), false
	}
	if over, why := se.Over(); over {
		se.give()
		return expired(why), false
	}
	return Result{}, true
}

func (se *Session) give() { se.turn <- struct{}{} }

func expired(why string) Result {
	return failure(ErrSessionExpired, errSessionOver, fmt.Sprintf("pybox: this session has ended (%s); start a new one with session_id \"new\".", why))
}

// Over reports whether the session has ended, and why.
func (se *Session) Over() (bool, string) {
	se.mu.Lock()
	defer se.mu.Unlock()
	return se.over, se.reason
}

// end removes the session's container; later calls get session_expired.
// A call running in it ends as cancelled.
func (se *Session) end(ctx context.Context, reason string) {
	se.mu.Lock()
	if se.over {
		se.mu.Unlock()
		return
	}
	se.over, se.reason = true, reason
	se.mu.Unlock()
	se.s.destroyLater(ctx, se.b)
}

// Close ends the session and removes its container.
func (se *Session) Close(ctx context.Context) {
	se.end(ctx, "it was closed")
}
