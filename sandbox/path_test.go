package sandbox

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests run the one execution path, the pool and the sessions on the
// fake engine (fake_test.go): no Docker. The real-engine tests prove the
// same behaviour against containers.

func TestFakeRun(t *testing.T) {
	s, f := newFake(t, Options{})
	res := s.Run(context.Background(), Request{Code: "print a\neprint b\nfile out/x.txt hello\nexit 3"})
	if res.Stdout != "a\n" || res.Stderr != "b\n" || res.ExitCode != 3 || res.Error != ErrNone {
		t.Errorf("Run = stdout %q stderr %q exit %d error %q; want a, b, 3, none", res.Stdout, res.Stderr, res.ExitCode, res.Error)
	}
	if len(res.Files) != 1 || res.Files[0].Path != "out/x.txt" || string(res.Files[0].Data) != "hello" {
		t.Errorf("Files = %v; want out/x.txt", res.Files)
	}
	waitFor(t, "the call's container to be removed", func() bool { return f.live() == 0 })
}

// TestFakeEveryCallItsOwnContainer: cold and pooled calls alike get a
// container of their own, never reused.
func TestFakeEveryCallItsOwnContainer(t *testing.T) {
	for _, size := range []int{0, 2} {
		s, f := newFake(t, Options{PoolSize: size})
		waitFor(t, "the pool to fill", func() bool { return s.PoolReady() == size })
		for i := range 5 {
			if res := s.Run(context.Background(), Request{Code: "print ok"}); res.Stdout != "ok\n" {
				t.Fatalf("pool %d, call %d: %q %q %s", size, i, res.Stdout, res.Stderr, res.Error)
			}
		}
		// A call may have found it empty and grown it: the size is the
		// pool's own now.
		waitFor(t, "the pool to refill", func() bool {
			n, _, _, _ := s.PoolStats()
			return n >= size && s.PoolReady() == n && f.live() == n
		})
		if n := f.maxCalls(); n != 1 {
			t.Errorf("pool %d: a container ran %d calls; want one each", size, n)
		}
	}
}

func TestFakeOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		code     string
		timeout  time.Duration
		wantErr  ErrorKind
		wantExit int
		wantNote string
	}{
		{"timeout", "print before\nsleep 1h", 300 * time.Millisecond, ErrTimeout, ExitTimeout, "stopped after its 300ms timeout"},
		{"a runner that answers nothing", "print before\ndeaf", 300 * time.Millisecond, ErrTimeout, ExitTimeout, "did not answer when asked to stop"},
		{"paused from outside", "print before\nfreeze", 300 * time.Millisecond, ErrSandboxLost, ExitTimeout, "paused from outside pybox"},
		{"memory", "print before\noom", 0, ErrMemoryLimit, ExitKilled, "memory limit"},
		{"killed from outside", "print before\nkill", 0, ErrSandboxLost, ExitKilled, "killed from outside pybox (SIGKILL"},
		{"the runner killed by the code (gVisor)", "print before\ndie 137", 0, ErrNone, ExitKilled, "the code killed the sandbox's runner"},
		{"the runner failed", "print before\ndie 1", 0, ErrSandboxLost, 1, "runner stopped (exit status 1)"},
		{"garbage on the stream", "print before\ngarbage", 0, ErrSandboxLost, ExitInternal, "broke pybox's protocol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f := newFake(t, Options{})
			start := time.Now()
			res := s.Run(context.Background(), Request{Code: tt.code, Timeout: tt.timeout})
			if res.Error != tt.wantErr || res.ExitCode != tt.wantExit || !strings.Contains(res.Stderr, tt.wantNote) {
				t.Errorf("Run(%q) = error %q exit %d stderr %q; want %q, %d, a note with %q", tt.code, res.Error, res.ExitCode, res.Stderr, tt.wantErr, tt.wantExit, tt.wantNote)
			}
			if res.Stdout != "before\n" {
				t.Errorf("Stdout = %q; want what was printed before", res.Stdout)
			}
			if tt.timeout > 0 {
				// The call's clock is the server's own: at most 2 s late.
				if took := time.Since(start); took > tt.timeout+2*time.Second+200*time.Millisecond {
					t.Errorf("a %v timeout returned after %v", tt.timeout, took)
				}
			}
			waitFor(t, "the container to be removed", func() bool { return f.live() == 0 })
		})
	}
}

func TestFakeRemovedFromOutside(t *testing.T) {
	s, f := newFake(t, Options{})
	done := make(chan Result, 1)
	go func() { done <- s.Run(context.Background(), Request{Code: "print up\nsleep 1h"}) }()
	var id string
	waitFor(t, "the call's container", func() bool {
		cs, _ := f.List(context.Background(), map[string]string{LabelManaged: "true"})
		if len(cs) == 1 && cs[0].State == "running" {
			id = cs[0].ID
		}
		return id != ""
	})
	time.Sleep(50 * time.Millisecond)
	f.removeFromOutside(id)
	res := <-done
	if res.Error != ErrSandboxLost || !strings.Contains(res.Stderr, "killed from outside pybox") || res.Stdout != "up\n" {
		t.Errorf("error %q stdout %q stderr %q; want sandbox_lost and a note", res.Error, res.Stdout, res.Stderr)
	}
}

// TestFakeCreateAfterDeadline: an engine too slow for the call's timeout
// gives sandbox_unavailable at the timeout, and the container it made
// after pybox stopped waiting is removed.
func TestFakeCreateAfterDeadline(t *testing.T) {
	s, f := newFake(t, Options{})
	f.createDelay = 400 * time.Millisecond
	start := time.Now()
	res := s.Run(context.Background(), Request{Code: "print never", Timeout: 200 * time.Millisecond})
	if res.Error != ErrSandboxUnavailable || !strings.Contains(res.Stderr, "did not start within the call's timeout") {
		t.Errorf("error %q stderr %q; want sandbox_unavailable", res.Error, res.Stderr)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %v", took)
	}
	waitFor(t, "the late container to be removed", func() bool {
		f.mu.Lock()
		made := f.created
		f.mu.Unlock()
		return made == 1 && f.live() == 0
	})
}

// TestFakeWaitCountsAgainstTimeout: a call that waits for a slot for its
// whole timeout returns at its timeout, without running.
func TestFakeWaitCountsAgainstTimeout(t *testing.T) {
	s, _ := newFake(t, Options{MaxConcurrent: 1})
	queuedBehind(t, s.Run, func() bool { r, _, _ := s.Stats(); return r == 1 }, "timeout")
}

// queuedBehind runs a long call, and beside it, once held says the first
// holds what the second needs, a call with a 300ms timeout: that call
// returns at its timeout as too_many_requests, saying why, without running.
func queuedBehind(t *testing.T, run func(context.Context, Request) Result, held func() bool, why string) {
	t.Helper()
	first := make(chan Result, 1)
	go func() { first <- run(context.Background(), Request{Code: "sleep 1500ms\nprint first"}) }()
	waitFor(t, "the first call to start", held)
	start := time.Now()
	res := run(context.Background(), Request{Code: "print second", Timeout: 300 * time.Millisecond})
	took := time.Since(start)
	if res.Error != ErrTooManyRequests || res.Stdout != "" || !strings.Contains(res.Stderr, why) {
		t.Errorf("the queued call: error %q stdout %q stderr %q; want too_many_requests saying %q", res.Error, res.Stdout, res.Stderr, why)
	}
	if took < 250*time.Millisecond || took > time.Second {
		t.Errorf("the queued call returned after %v; want at its 300ms timeout", took)
	}
	if r := <-first; r.Stdout != "first\n" {
		t.Errorf("the first call: %q %q", r.Stdout, r.Error)
	}
}

func TestFakePool(t *testing.T) {
	t.Run("a dead pooled sandbox is not served", func(t *testing.T) {
		s, f := newFake(t, Options{PoolSize: 1})
		waitFor(t, "the pool to fill", func() bool { return s.PoolReady() == 1 })
		s.pool.mu.Lock()
		dead := s.pool.ready[0].id
		s.pool.mu.Unlock()
		f.removeFromOutside(dead)
		waitFor(t, "the pool to see it dead", func() bool {
			s.pool.mu.Lock()
			defer s.pool.mu.Unlock()
			return len(s.pool.ready) == 0 || !s.pool.ready[0].conn.alive()
		})
		if res := s.Run(context.Background(), Request{Code: "print ok"}); res.Stdout != "ok\n" || res.Error != ErrNone {
			t.Errorf("after the pooled sandbox died: %q %q %q", res.Stdout, res.Stderr, res.Error)
		}
	})
	t.Run("plan: light under load, full after, demand, shrink, backoff", func(t *testing.T) {
		alive := func(light bool) *box {
			c := &conn{closed: make(chan struct{})}
			return &box{conn: c, started: time.Now(), light: light}
		}
		now := time.Now()
		newPool := func() *pool { return &pool{min: 2, max: 8, parallel: 2, size: 2, lastMiss: now, sized: now} }
		p := newPool()
		if stale, starts := p.plan(time.Hour, now); len(stale) != 0 || len(starts) != 2 || !starts[0] || !starts[1] || p.starting != 2 {
			t.Errorf("an empty pool just after a miss: %d dropped, starts %v (%d starting); want two light starts", len(stale), starts, p.starting)
		}
		p.starting = 0
		p.ready = []*box{alive(false), alive(true)}
		if stale, starts := p.plan(time.Hour, now); len(stale) != 0 || len(starts) != 0 {
			t.Errorf("a full pool under load: %d dropped, starts %v; want the light one kept", len(stale), starts)
		}
		later := now.Add(2 * loadWindow)
		stale, starts := p.plan(time.Hour, later)
		if len(stale) != 1 || !stale[0].light || len(starts) != 1 || starts[0] {
			t.Errorf("once the load passed: %d dropped, starts %v; want the light one traded for a full start", len(stale), starts)
		}

		p = newPool()
		old := alive(false)
		old.started = now.Add(-2 * time.Hour)
		dead := alive(false)
		close(dead.conn.closed)
		p.ready = []*box{old, dead, alive(false)}
		if stale, starts := p.plan(time.Hour, now); len(stale) != 2 || len(starts) != 1 {
			t.Errorf("a stale and a dead one: %d dropped, starts %v; want both dropped and one start", len(stale), starts)
		}

		// Three calls wait: they are served first, at most parallel at once.
		p = newPool()
		p.waiters = make([]chan taken, 3)
		if _, starts := p.plan(time.Hour, now); len(starts) != 2 || p.starting != 2 {
			t.Errorf("three waiting calls: starts %v; want 2 (the parallelism)", starts)
		}

		// The size falls back by one each poolShrinkEvery without a miss,
		// and what is ready beyond it goes, light ones first.
		p = newPool()
		p.size, p.lastMiss, p.sized = 4, now.Add(-poolShrinkEvery), now.Add(-poolShrinkEvery)
		p.ready = []*box{alive(false), alive(true), alive(false), alive(false)}
		stale, starts = p.plan(time.Hour, now)
		if p.size != 3 || len(stale) != 1 || !stale[0].light || len(starts) != 0 {
			t.Errorf("idle at size 4: size %d, %d dropped, starts %v; want 3, the light one, none", p.size, len(stale), starts)
		}
		if p.plan(time.Hour, now); p.size != 3 {
			t.Errorf("again at once: size %d; want 3 until another poolShrinkEvery", p.size)
		}

		// While starts fail, the pool's own size waits for the retry, a
		// waiting call does not.
		p = newPool()
		p.failing, p.retry = true, now.Add(time.Minute)
		if _, starts := p.plan(time.Hour, now); len(starts) != 0 {
			t.Errorf("failing, nobody waiting: starts %v; want none before the retry", starts)
		}
		p.waiters = make([]chan taken, 1)
		if _, starts := p.plan(time.Hour, now); len(starts) != 1 {
			t.Errorf("failing, a call waiting: starts %v; want one for it", starts)
		}
	})
	t.Run("the pool grows when calls find it empty, a waiting call gets the next one", func(t *testing.T) {
		s, f := newFake(t, Options{PoolSize: 1, PoolMax: 3})
		waitFor(t, "the pool to fill", func() bool { return s.PoolReady() == 1 })
		// Sandboxes now take a while to be ready, so that each call but the
		// first finds the pool empty however the four are scheduled.
		f.mu.Lock()
		f.readyDelay = 500 * time.Millisecond
		f.mu.Unlock()
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each call holds its sandbox a while, so that the four overlap.
				if res := s.Run(context.Background(), Request{Code: "print ok\nsleep 300ms"}); res.Stdout != "ok\n" || res.Timing.Source != SourcePool {
					t.Errorf("a call at once: %q %q %q from %q", res.Stdout, res.Stderr, res.Error, res.Timing.Source)
				}
			}()
		}
		wg.Wait()
		if size, _, _, _ := s.PoolStats(); size != 3 {
			t.Errorf("after four calls at once on a pool of 1: size %d; want its cap, 3", size)
		}
		waitFor(t, "the pool to fill to its new size", func() bool { _, ready, _, _ := s.PoolStats(); return ready == 3 })
	})
	t.Run("backs off while the engine fails, fills when it is back", func(t *testing.T) {
		f := newFakeEngine()
		f.createErr = errImageMissing
		s, err := newSandbox(Options{PoolSize: 2}, engineParts{ctr: f, lst: f}, nopLogger())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		if res := s.Run(context.Background(), Request{Code: "print x"}); res.Error != ErrSandboxUnavailable {
			t.Errorf("with a failing engine: %q", res.Error)
		}
		f.mu.Lock()
		f.createErr = nil
		f.mu.Unlock()
		// It grew by one for the call that found it empty.
		waitFor(t, "the pool to fill once the engine works", func() bool { return s.PoolReady() == 3 })
	})
}

func TestFakeSession(t *testing.T) {
	s, f := newFake(t, Options{})
	ctx := context.Background()
	se, res := s.StartSession(ctx)
	if se == nil {
		t.Fatalf("StartSession: %s %s", res.Error, res.Stderr)
	}
	steps := []struct {
		code, stdout string
		exit         int
		err          ErrorKind
	}{
		{"set x 41", "", 0, ErrNone},
		{"get x", "41\n", 0, ErrNone},
		{"exit 3", "", 3, ErrNone},
		{"get x", "41\n", 0, ErrNone},
	}
	for i, st := range steps {
		r := se.Run(ctx, Request{Code: st.code})
		if r.Stdout != st.stdout || r.ExitCode != st.exit || r.Error != st.err {
			t.Errorf("call %d %q: stdout %q exit %d error %q; want %q %d %q", i+1, st.code, r.Stdout, r.ExitCode, r.Error, st.stdout, st.exit, st.err)
		}
	}
	if f.live() != 1 {
		t.Errorf("%d containers for one session", f.live())
	}

	// A timeout interrupts, as Ctrl-C would, and the session goes on.
	r := se.Run(ctx, Request{Code: "print spinning\nsleep 1h", Timeout: 200 * time.Millisecond})
	if r.Error != ErrTimeout || r.ExitCode != ExitTimeout || !strings.Contains(r.Stderr, "interrupted, as Ctrl-C would") {
		t.Errorf("timeout: %q %d %q", r.Error, r.ExitCode, r.Stderr)
	}
	if r := se.Run(ctx, Request{Code: "get x"}); r.Stdout != "41\n" {
		t.Errorf("after the interrupt: %q %q", r.Stdout, r.Stderr)
	}

	// Code that ignores the interrupt is stopped; its Python restarts.
	start := time.Now()
	r = se.Run(ctx, Request{Code: "hang", Timeout: 200 * time.Millisecond})
	if r.Error != ErrTimeout || !strings.Contains(r.Stderr, "restarted") {
		t.Errorf("an unstoppable call: %q %q", r.Error, r.Stderr)
	}
	if took := time.Since(start); took > 200*time.Millisecond+sessionGrace+stopGrace {
		t.Errorf("an unstoppable call returned after %v", took)
	}
	if r := se.Run(ctx, Request{Code: "get x\nprint alive"}); r.Stdout != "\nalive\n" || r.Error != ErrNone {
		t.Errorf("after the restart: %q %q %q", r.Stdout, r.Stderr, r.Error)
	}

	// The session's sandbox dies: the session ends.
	r = se.Run(ctx, Request{Code: "die 1"})
	if r.Error != ErrSandboxLost || !strings.Contains(r.Stderr, "the session has ended") {
		t.Errorf("a dead sandbox: %q %q", r.Error, r.Stderr)
	}
	if r := se.Run(ctx, Request{Code: "print x"}); r.Error != ErrSessionExpired {
		t.Errorf("after the end: %q %q", r.Error, r.Stderr)
	}
	waitFor(t, "the session's container to be removed", func() bool { return f.live() == 0 })
}

// TestFakeSessionQueuedCall: a call queued behind a running one in its
// session keeps its own timeout.
func TestFakeSessionQueuedCall(t *testing.T) {
	s, _ := newFake(t, Options{})
	ctx := context.Background()
	se, res := s.StartSession(ctx)
	if se == nil {
		t.Fatal(res.Stderr)
	}
	defer se.Close(ctx)
	queuedBehind(t, se.Run, func() bool { r, _, _ := s.Stats(); return r == 1 }, "busy")
	if r := se.Run(ctx, Request{Code: "print third"}); r.Stdout != "third\n" {
		t.Errorf("the next call: %q %q", r.Stdout, r.Stderr)
	}
}

func TestFakeSessionEndedDuringCall(t *testing.T) {
	s, _ := newFake(t, Options{})
	ctx := context.Background()
	se, _ := s.StartSession(ctx)
	done := make(chan Result, 1)
	go func() { done <- se.Run(ctx, Request{Code: "print up\nsleep 1h"}) }()
	time.Sleep(100 * time.Millisecond)
	se.Close(ctx)
	r := <-done
	if r.Error != ErrCancelled || r.Stdout != "up\n" {
		t.Errorf("a call cut by the session's end: %q %q %q; want cancelled", r.Error, r.Stdout, r.Stderr)
	}
}

func TestFakeClose(t *testing.T) {
	f := newFakeEngine()
	s, err := newSandbox(Options{PoolSize: 1}, engineParts{ctr: f, lst: f}, nopLogger())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]Result, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = s.Run(context.Background(), Request{Code: "sleep 1h", Timeout: time.Hour})
		}()
	}
	waitFor(t, "three calls to run", func() bool { r, _, _ := s.Stats(); return r == 3 })
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, r := range results {
		if r.Error != ErrCancelled {
			t.Errorf("call %d cut by Close: %q", i, r.Error)
		}
	}
	if n := f.live(); n != 0 {
		t.Errorf("%d containers left after Close", n)
	}
	if r := s.Run(context.Background(), Request{Code: "print x"}); r.Error != ErrCancelled {
		t.Errorf("Run after Close: %q", r.Error)
	}
	if se, r := s.StartSession(context.Background()); se != nil || r.Error != ErrCancelled {
		t.Errorf("StartSession after Close: %v %q", se, r.Error)
	}
}

// TestFakeReconcilerRetriesRemovals: a removal that failed (the engine was
// restarting) is tried again by the reconciler, without a new server.
func TestFakeReconcilerRetriesRemovals(t *testing.T) {
	s, f := newFake(t, Options{ReconcileInterval: 50 * time.Millisecond})
	f.mu.Lock()
	f.removeFails = 3
	f.mu.Unlock()
	// A session's container: it exits only when removed.
	se, res := s.StartSession(context.Background())
	if se == nil {
		t.Fatal(res.Stderr)
	}
	se.Close(context.Background())
	waitFor(t, "the reconciler to remove it", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return f.live() == 0 && len(s.failed) == 0 && len(s.active) == 0
	})
}

// TestInflightRefusesAfterClose: work that arrives after Close is refused,
// never counted after Close has stopped counting.
func TestInflightRefusesAfterClose(t *testing.T) {
	var f inflight
	if !f.enter() {
		t.Fatal("enter refused before close")
	}
	zero := f.close()
	if f.enter() {
		t.Error("enter accepted after close")
	}
	select {
	case <-zero:
		t.Fatal("close reported no work while one piece was in flight")
	default:
	}
	f.leave()
	select {
	case <-zero:
	case <-time.After(time.Second):
		t.Fatal("close did not report the end of the work")
	}
}

func TestRefusesRoot(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		ok   bool
	}{
		{"default: a uid per sandbox", Options{}, true},
		{"a fixed uid", Options{User: "10001:10001"}, true},
		{"uid 0", Options{User: "0"}, false},
		{"gid 0", Options{User: "10001:0"}, false},
		{"a name", Options{User: "root"}, false},
		{"the engine's capabilities", Options{KeepCapabilities: true}, false},
		{"uid 0, allowed", Options{User: "0:0", AllowRoot: true}, true},
		{"capabilities, allowed", Options{KeepCapabilities: true, AllowRoot: true}, true},
		{"a uid range from 0", Options{UIDBase: 1, UIDCount: 10}, false},
	}
	for _, tt := range tests {
		_, err := tt.opt.resolve()
		if (err == nil) != tt.ok {
			t.Errorf("%s: resolve() = %v; want ok %v", tt.name, err, tt.ok)
		}
	}
	// Every spec the default options make: a non-root user, no capability.
	s, _ := newFake(t, Options{})
	seen := map[string]bool{}
	for range 20 {
		user, uid := s.uids.take()
		spec := s.containerSpec("c", user)
		if !nonRootUser(spec.User) || !spec.CapDropAll || uid < DefaultUIDBase || seen[user] {
			t.Errorf("spec user %q (uid %d), cap drop all %v; want a non-root uid of its own from the range, every capability dropped", spec.User, uid, spec.CapDropAll)
		}
		seen[user] = true
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
