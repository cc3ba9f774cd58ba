package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Runner modes: a sandbox serves one call, or a session's calls.
const (
	modeOnce    = "once"
	modeSession = "session"
)

// flushInterval is how often the runner writes the code's buffered output
// at the latest: a call stopped from outside loses at most what the code
// printed in its last flushInterval.
const flushInterval = 50 * time.Millisecond

// runnerMargin is how long past a deadline the runner waits for its server
// before it ends the sandbox itself. The server stops a call at most 2 s
// past it; a runner whose server is gone (its attach ended) ends at once.
const runnerMargin = 10 * time.Second

// box is a started sandbox: a container and its runner's conn.
type box struct {
	id      string
	uid     int // given back to the uid pool when the box is gone
	conn    *conn
	mode    string
	started time.Time
	// light pooled sandboxes were made without the pre-imports, under load.
	light bool
	seq   int // calls served
	// dying is set when pybox itself removes the box: a call it cuts short
	// was cancelled, not lost.
	dying atomic.Bool
	// stuck says whether its runner did not answer a stop, and why.
	stuck atomic.Int32
}

// Why a runner did not answer a stop.
const (
	stuckNot    = iota
	stuckSilent // the engine said nothing: stalled, perhaps
	stuckPaused // the engine says it is paused
)

// startBox makes, starts and connects a sandbox within the deadline. With
// preimport, its runner imports the pre-import modules before it is ready.
// Its runner ends it itself when it has had no call for life (a session's:
// at all) and a margin.
func (s *Sandbox) startBox(ctx context.Context, mode, callID string, preimport bool, deadline time.Time, life time.Duration, tweaks ...func(*containerSpec)) (*box, *Result) {
	user, uid := s.uids.take()
	spec := s.containerSpec(callID, user)
	spec.Lifetime = time.Until(deadline) + life + 2*runnerMargin
	if mode == modeSession {
		spec.Labels[LabelSession] = "true"
	}
	for _, t := range tweaks {
		t(&spec)
	}
	fail := func(r Result) (*box, *Result) { s.uids.give(uid); s.counts.startFailures.Add(1); return nil, &r }
	cctx, cancel := s.engineContext(ctx, deadline)
	id, err := s.ctr.Create(cctx, spec)
	cancel()
	if err != nil {
		if cctx.Err() != nil {
			// The engine may make it after we stopped waiting (it never
			// starts, so it never removes itself): the reconciler looks
			// for it until it turns up.
			s.mu.Lock()
			s.abandoned[callID] = time.Now()
			s.mu.Unlock()
			s.background(func() { s.removeByCall(context.WithoutCancel(ctx), callID) })
		}
		return fail(s.engineFailure(ctx, err, deadline))
	}
	s.track(id)
	s.counts.created.Add(1)
	undo := func(r Result) (*box, *Result) {
		s.remove(ctx, id)
		return fail(r)
	}
	lctx, cancel := s.engineContext(ctx, deadline)
	started := time.Now()
	st, err := s.ctr.Launch(lctx, id)
	cancel()
	if err != nil {
		return undo(s.engineFailure(ctx, err, deadline))
	}
	cfg := s.runnerConfig(mode, life)
	if preimport {
		cfg.PreImport = s.opt.PreImport
	}
	c, err := openConn(st, cfg, s.outputLimits())
	if err != nil {
		st.Close()
		return undo(s.engineFailure(ctx, err, deadline))
	}
	return &box{id: id, uid: uid, conn: c, mode: mode, started: started, light: mode == modeOnce && !preimport}, nil
}

// runnerConfig is the configuration a runner gets first.
func (s *Sandbox) runnerConfig(mode string, life time.Duration) runnerConfig {
	return runnerConfig{Mode: mode, Flush: flushInterval.Seconds(), Expire: (life + runnerMargin).Seconds(), Limits: runnerLimits{
		Files:        s.opt.MaxOutputFiles,
		FileBytes:    s.opt.MaxOutputFileBytes,
		TotalBytes:   s.opt.MaxOutputBytes,
		RequestBytes: MaxCodeBytes + s.opt.MaxInputBytes + 1<<20,
		Procs:        s.rlimitProcs,
	}}
}

// waitReady waits until a box's runner is ready for code.
func (s *Sandbox) waitReady(ctx context.Context, b *box, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-b.conn.readyc:
		return nil
	case <-b.conn.closed:
		s.counts.startFailures.Add(1)
		return fmt.Errorf("the sandbox stopped as it started: %w", b.conn.Err())
	case <-t.C:
		s.counts.startFailures.Add(1)
		return errors.New("the sandbox was not ready in time")
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return errClosed
	}
}

// engineContext bounds one engine request by the call's deadline.
func (s *Sandbox) engineContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if d := time.Now().Add(engineCallTimeout); d.Before(deadline) {
		deadline = d
	}
	return context.WithDeadline(ctx, deadline)
}

// destroyLater destroys a box in the background.
func (s *Sandbox) destroyLater(ctx context.Context, b *box) {
	b.dying.Store(true)
	b.conn.close(errors.New("the sandbox was removed"))
	s.background(func() { s.destroy(context.WithoutCancel(ctx), b) })
}

// destroy closes a box's conn and removes its container.
func (s *Sandbox) destroy(ctx context.Context, b *box) {
	b.dying.Store(true)
	b.conn.close(errors.New("the sandbox was removed"))
	if s.remove(ctx, b.id) == nil {
		s.uids.give(b.uid)
	}
}

func (s *Sandbox) containerSpec(callID, user string) containerSpec {
	o := s.opt
	uid, gid, _ := cutUser(user)
	return containerSpec{
		Image: o.Image,
		Cmd:   []string{"python3", "-I", "-B", "-c", runnerSource},
		Env:   containerEnv(),
		// Nothing in the sandbox is root: the runner and the code run as
		// this uid, with no capability (see runner.py).
		User:       user,
		WorkingDir: workDir,
		Labels: map[string]string{
			LabelManaged: "true",
			LabelOwner:   s.owner,
			LabelCall:    callID,
		},
		Hostname:    "sandbox",
		Runtime:     o.Runtime,
		Network:     o.Network,
		MemoryBytes: o.MemoryBytes,
		NanoCPUs:    o.NanoCPUs,
		PidsLimit:   o.PidsLimit,
		ReadOnly:    !o.WritableRoot,
		Tmpfs: map[string]string{
			"/tmp":           fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", o.TmpfsBytes),
			"/mnt/user-data": fmt.Sprintf("rw,nosuid,nodev,noexec,size=%d,uid=%s,gid=%s", o.MaxInputBytes+(1<<20), uid, gid),
			"/mnt/outputs":   fmt.Sprintf("rw,nosuid,nodev,noexec,size=%d,uid=%s,gid=%s", o.OutputsTmpfsBytes, uid, gid),
		},
		ShmBytes:   DefaultShmBytes,
		CapDropAll: !o.KeepCapabilities,
		NoNewPrivs: !o.AllowNewPrivileges,
		Seccomp:    o.seccomp,
		LogDriver:  o.LogDriver,
		NoFile:     DefaultNoFile,
	}
}

func (s *Sandbox) outputLimits() outputLimits {
	return outputLimits{files: s.opt.MaxOutputFiles, fileBytes: s.opt.MaxOutputFileBytes, total: s.opt.MaxOutputBytes}
}

func (s *Sandbox) track(id string) {
	s.mu.Lock()
	s.active[id] = struct{}{}
	s.mu.Unlock()
}

// remove destroys a container even when the caller has gone away.
func (s *Sandbox) remove(ctx context.Context, id string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := s.counts.removal(s.ctr.Remove(rctx, id)); err != nil {
		s.log.Warn().Str("container", shortID(id)).Err(err).Msg("removing container failed; the reconciler tries again")
		s.mu.Lock()
		s.failed[id] = time.Now()
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	delete(s.active, id)
	delete(s.failed, id)
	s.mu.Unlock()
	return nil
}

// removeByCall removes whatever container carries a call's label.
func (s *Sandbox) removeByCall(ctx context.Context, callID string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	cs, err := s.lst.List(rctx, map[string]string{LabelManaged: "true", LabelCall: callID})
	if err != nil {
		return
	}
	for _, c := range cs {
		s.remove(rctx, c.ID)
	}
}
