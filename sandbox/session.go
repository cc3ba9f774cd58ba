package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	// shared, on an engine that keeps sessions for every replica
	// (Kubernetes): the session's pod is attached only for a call, under
	// its lease.
	shared *sharedSession

	mu     sync.Mutex
	over   bool
	reason string
}

// errSessionOver means the session's container has ended.
var errSessionOver = errors.New("the session has ended")

type sharedSession struct {
	store  sessionStore
	holder string // this process, in the lease
}

// SharedSessions reports whether every replica of pybox on the same engine
// can find and use a session by its id (Kubernetes), so that a session
// need not live in the replica that started it.
func (s *Sandbox) SharedSessions() bool { return s.store != nil }

// SessionKey is what a session's id is found by: a hash, so that the
// cluster keeps no usable id.
func SessionKey(id string) string {
	h := sha256.Sum256([]byte("pybox-session:" + id))
	return hex.EncodeToString(h[:20])
}

// StartSession starts a persistent sandbox. On failure the Result says why
// in the usual way and the Session is nil.
func (s *Sandbox) StartSession(ctx context.Context) (*Session, Result) {
	return s.StartSharedSession(ctx, "", "")
}

// StartSharedSession starts a persistent sandbox which, on an engine that
// shares sessions, any replica finds by the session's id and whose owner
// it then checks.
func (s *Sandbox) StartSharedSession(ctx context.Context, id, owner string) (*Session, Result) {
	if !s.work.enter() {
		return nil, failure(ErrCancelled, errClosed, "pybox: the server is shutting down.")
	}
	defer s.work.leave()
	deadline := time.Now().Add(engineCallTimeout)
	shared := s.store != nil && id != ""
	b, fail := s.startBox(ctx, modeSession, NewID(), false, deadline, s.opt.SessionMaxAge, func(c *containerSpec) {
		if shared {
			c.Persistent = true
			c.Labels[LabelSessionKey] = SessionKey(id)
			c.Labels[AnnotationSessionOwner] = owner
		}
	})
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
	if shared {
		se.shared = &sharedSession{store: s.store, holder: s.owner}
		se.detach()
	}
	return se, Result{}
}

// FindSession finds a session another replica started, by its id, and
// returns it with its owner; nil when no live session has that id.
func (s *Sandbox) FindSession(ctx context.Context, id string) (*Session, string) {
	if s.store == nil {
		return nil, ""
	}
	fctx, cancel := withEngineTimeout(ctx)
	defer cancel()
	pod, ann, err := s.store.FindSession(fctx, SessionKey(id))
	if err != nil {
		return nil, ""
	}
	b := &box{id: pod, mode: modeSession, started: time.Now(), conn: detachedConn()}
	se := &Session{s: s, b: b, turn: make(chan struct{}, 1), shared: &sharedSession{store: s.store, holder: s.owner}}
	se.turn <- struct{}{}
	return se, ann[AnnotationSessionOwner]
}

// LastUsed is when a call last ended in the session, through any replica:
// for a shared session the pod's record, else ok is false.
func (se *Session) LastUsed(ctx context.Context) (t time.Time, ok bool) {
	if se.shared == nil {
		return time.Time{}, false
	}
	lctx, cancel := withEngineTimeout(ctx)
	defer cancel()
	t, err := se.shared.store.LastUsed(lctx, se.b.id)
	if errors.Is(err, errGone) {
		se.markOver("its sandbox is gone")
	}
	return t, err == nil
}

// Shared reports whether the session is kept for every replica.
func (se *Session) Shared() bool { return se.shared != nil }

// attach takes a shared session's lease and attaches to its pod for one
// call, within the call's deadline.
func (se *Session) attach(ctx context.Context, deadline time.Time) (Result, bool) {
	s := se.s
	for {
		lctx, cancel := s.engineContext(ctx, deadline)
		err := se.shared.store.Lease(lctx, se.b.id, se.shared.holder, deadline.Add(runnerMargin))
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, errGone) {
			se.markOver("its sandbox is gone")
			return expired("its sandbox is gone"), false
		}
		if !errors.Is(err, errLeased) {
			return s.engineFailure(ctx, err, deadline), false
		}
		select {
		case <-ctx.Done():
			return failure(ErrCancelled, ctx.Err(), "pybox: the call was cancelled before it ran."), false
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return failure(ErrTooManyRequests, errDeadline, "pybox: the session was busy with a call through another pybox replica for this call's whole timeout, so the code did not run."), false
		}
	}
	lctx, cancel := s.engineContext(ctx, deadline)
	st, err := s.ctr.Launch(lctx, se.b.id)
	cancel()
	if err == nil {
		var c *conn
		if c, err = openConn(st, s.runnerConfig(modeSession, s.opt.SessionMaxAge), s.outputLimits()); err == nil {
			se.b.conn = c
			err = s.waitReady(ctx, se.b, deadline)
		} else {
			st.Close()
		}
	}
	if err != nil {
		se.release()
		if errors.Is(err, errGone) {
			se.markOver("its sandbox is gone")
			return expired("its sandbox is gone"), false
		}
		return s.said(failure(ErrSandboxUnavailable, err, "pybox: the session's sandbox could not be reached: "+err.Error())), false
	}
	return Result{}, true
}

// detach closes a shared session's attach (its runner waits for the next)
// and gives its lease back.
func (se *Session) detach() {
	se.b.conn.close(errDetached)
	se.release()
}

func (se *Session) release() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = se.shared.store.Lease(ctx, se.b.id, se.shared.holder, time.Time{})
}

func (se *Session) markOver(reason string) {
	se.mu.Lock()
	if !se.over {
		se.over, se.reason = true, reason
	}
	se.mu.Unlock()
}

// errDetached closes a shared session's attach between calls.
var errDetached = errors.New("detached between calls")

// detachedConn is a shared session's conn between calls: closed.
func detachedConn() *conn {
	c := &conn{readyc: make(chan struct{}), closed: make(chan struct{}), reader: make(chan struct{})}
	close(c.closed)
	close(c.reader)
	c.err, c.isClosed = errDetached, true
	return c
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
