package sandbox

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"time"
)

// DefaultPreImport are the modules a pooled sandbox imports ahead of time.
var DefaultPreImport = []string{"numpy", "pandas", "matplotlib.pyplot"}

// DefaultPoolMaxIdle is how long a pooled sandbox may wait before it is
// replaced by a fresh one.
const DefaultPoolMaxIdle = 5 * time.Minute

// The pool follows demand: each call that finds it empty raises its size by
// one, up to its cap; each poolShrinkEvery without such a call lowers it by
// one, down to the size it was given.
const (
	poolShrinkEvery = 15 * time.Second
	// loadWindow is how long after a miss the pool refills with light
	// sandboxes (no pre-imports): importing numpy, pandas and matplotlib
	// for each would take the CPU the calls need, and the engine's create
	// rate bounds throughput either way.
	loadWindow = 3 * time.Second
)

// pool keeps started sandboxes, each with Python up (and, unless under
// load, the common modules imported), waiting for one call each. A sandbox
// taken from the pool serves exactly one call and is destroyed like any
// other. A call that finds the pool empty waits for the next sandbox the
// pool starts, which is started light for it; several start at once, up
// to the pool's parallelism.
type pool struct {
	min, max, parallel int

	mu       sync.Mutex
	ready    []*box
	starting int          // sandboxes being started
	waiters  []chan taken // calls waiting for a sandbox, oldest first
	size     int          // the size kept now, from min to max
	lastMiss time.Time
	// sized is when size last changed.
	sized time.Time
	// failing is set while starts fail; retry is when the next start for
	// the pool's own size may be tried (a waiting call never waits for it).
	failing bool
	retry   time.Time
	backoff time.Duration

	wake chan struct{}
	done chan struct{}
}

// taken is what a waiting call gets: a sandbox, or why none started.
type taken struct {
	b    *box
	fail *Result
}

// startPool starts the refiller when the pool is on.
func (s *Sandbox) startPool() {
	o := s.opt
	if o.PoolSize <= 0 {
		return
	}
	s.pool = &pool{min: o.PoolSize, max: o.PoolMax, parallel: o.PoolParallel, size: o.PoolSize,
		sized: time.Now(), backoff: time.Second, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.refill()
}

// defaultPoolParallel is how many sandboxes the pool starts at once: one
// per core, since a start is mostly the engine's and Python's CPU.
func defaultPoolParallel() int { return max(1, runtime.NumCPU()) }

// takeWarm returns a pooled sandbox: a ready one, or else the next one the
// pool starts, which it waits for within the call's deadline. It returns
// nil and a Result when none could be had, and nil and nil when the wait
// ended for the caller (ctx) or the server (Close).
func (s *Sandbox) takeWarm(ctx context.Context, deadline time.Time) (*box, *Result) {
	p := s.pool
	p.mu.Lock()
	if b := p.takeReady(s.opt.PoolMaxIdle, s); b != nil {
		p.mu.Unlock()
		s.counts.poolHits.Add(1)
		return b, nil
	}
	s.counts.poolMisses.Add(1)
	p.lastMiss = time.Now()
	if p.size < p.max {
		p.size++
		p.sized = p.lastMiss
	}
	ch := make(chan taken, 1)
	p.waiters = append(p.waiters, ch)
	p.mu.Unlock()
	p.poke()

	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case got := <-ch:
		return got.b, got.fail
	case <-t.C:
	case <-ctx.Done():
	case <-s.stop:
	}
	p.mu.Lock()
	for i, w := range p.waiters {
		if w == ch {
			p.waiters = append(p.waiters[:i:i], p.waiters[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	select {
	case got := <-ch: // handed over as the wait ended: back to the pool
		if got.b != nil {
			p.put(got.b)
		}
	default:
	}
	if ctx.Err() == nil && time.Now().After(deadline) {
		r := failure(ErrSandboxUnavailable, errDeadline, "pybox: no sandbox was ready within the call's timeout (the engine was slow to start one), so the code did not run. Try again, or with a longer timeout; `pybox doctor` checks the engine.")
		return nil, &r
	}
	return nil, nil
}

// takeReady pops a live ready sandbox, one with the pre-imports first;
// the dead and the stale are removed in the background. p.mu is held.
func (p *pool) takeReady(maxIdle time.Duration, s *Sandbox) *box {
	pick := -1
	for i := 0; i < len(p.ready); i++ {
		b := p.ready[i]
		if !b.conn.alive() || time.Since(b.started) > maxIdle {
			p.ready = append(p.ready[:i:i], p.ready[i+1:]...)
			i--
			go s.destroy(context.Background(), b)
			continue
		}
		if pick < 0 || (p.ready[pick].light && !b.light) {
			pick = i
		}
	}
	if pick < 0 {
		return nil
	}
	b := p.ready[pick]
	p.ready = append(p.ready[:pick:pick], p.ready[pick+1:]...)
	return b
}

// put hands a started sandbox to the oldest waiting call, or keeps it.
func (p *pool) put(b *box) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.handOrKeep(b)
}

func (p *pool) handOrKeep(b *box) {
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		w <- taken{b: b}
		return
	}
	p.ready = append(p.ready, b)
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// refill keeps the pool at its size and its waiting calls served, starting
// sandboxes in parallel; it replaces sandboxes that waited too long, and
// backs off while the engine fails.
func (s *Sandbox) refill() {
	p := s.pool
	defer close(p.done)
	tick := time.NewTicker(min(max(s.opt.PoolMaxIdle/4, time.Second), poolShrinkEvery))
	defer tick.Stop()
	for {
		stale, starts := p.plan(s.opt.PoolMaxIdle, time.Now())
		for _, b := range stale {
			s.destroy(context.Background(), b)
		}
		for _, light := range starts {
			if !s.work.enter() {
				p.mu.Lock()
				p.starting--
				p.mu.Unlock()
				continue
			}
			go func() {
				defer s.work.leave()
				s.startPooled(light)
			}()
		}
		// Besides a poke and the tick: the retry after a failure, and the
		// end of the load, when light sandboxes are traded for full ones.
		var retry, unloaded <-chan time.Time
		p.mu.Lock()
		if p.failing {
			retry = time.After(time.Until(p.retry))
		}
		if slices.ContainsFunc(p.ready, func(b *box) bool { return b.light }) {
			unloaded = time.After(time.Until(p.lastMiss.Add(loadWindow)))
		}
		p.mu.Unlock()
		select {
		case <-s.stop:
			return
		case <-p.wake:
		case <-tick.C:
		case <-retry:
		case <-unloaded:
		}
	}
}

// plan decides, at now, which ready sandboxes go (stale, dead, beyond the
// size, or light once the load has passed) and which starts begin, light
// or not. The starts are counted as starting.
func (p *pool) plan(maxIdle time.Duration, now time.Time) (stale []*box, starts []bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.size > p.min && now.Sub(p.lastMiss) >= poolShrinkEvery && now.Sub(p.sized) >= poolShrinkEvery {
		p.size--
		p.sized = now
	}
	loaded := now.Sub(p.lastMiss) < loadWindow
	fresh := p.ready[:0]
	for _, b := range p.ready {
		if now.Sub(b.started) > maxIdle || !b.conn.alive() {
			stale = append(stale, b)
		} else {
			fresh = append(fresh, b)
		}
	}
	p.ready = fresh
	for len(p.ready) > p.size {
		// The oldest go first, and a light one before any full one.
		i := 0
		for j, b := range p.ready {
			if b.light {
				i = j
				break
			}
		}
		stale = append(stale, p.ready[i])
		p.ready = append(p.ready[:i:i], p.ready[i+1:]...)
	}
	if !loaded && len(p.waiters) == 0 && p.starting == 0 && len(p.ready) == p.size {
		for i, b := range p.ready {
			if b.light {
				stale = append(stale, b)
				p.ready = append(p.ready[:i:i], p.ready[i+1:]...)
				break
			}
		}
	}
	// Waiting calls are served first and never wait for a backoff; the
	// pool's own size waits for it while the engine fails.
	need := len(p.waiters) - p.starting
	if !p.failing || !now.Before(p.retry) {
		need = p.size + len(p.waiters) - len(p.ready) - p.starting
	}
	n := min(need, p.parallel-p.starting)
	for i := 0; i < n; i++ {
		starts = append(starts, loaded || i < len(p.waiters))
	}
	p.starting += max(n, 0)
	return stale, starts
}

// startPooled starts one pooled sandbox and hands it over or keeps it. A
// failure goes to the oldest waiting call, if any, and backs the pool off.
func (s *Sandbox) startPooled(light bool) {
	b, fail := s.prepare(!light)
	p := s.pool
	p.mu.Lock()
	p.starting--
	if fail != nil {
		s.log.Debug().Err(fail.Cause).Msg("preparing a pooled sandbox failed; retrying")
		// One round of starts that fail together backs off once.
		if now := time.Now(); !p.failing || !now.Before(p.retry) {
			p.failing = true
			p.retry = now.Add(p.backoff)
			p.backoff = min(2*p.backoff, 30*time.Second)
		}
		if len(p.waiters) > 0 {
			w := p.waiters[0]
			p.waiters = p.waiters[1:]
			w <- taken{fail: fail}
		}
		p.mu.Unlock()
		p.poke()
		return
	}
	p.failing, p.backoff = false, time.Second
	select {
	case <-s.stop:
		p.mu.Unlock()
		s.destroy(context.Background(), b)
		return
	default:
	}
	p.handOrKeep(b)
	p.mu.Unlock()
	p.poke()
}

// prepare starts a pooled sandbox and waits until it is ready for code.
func (s *Sandbox) prepare(preimport bool) (*box, *Result) {
	ctx := context.Background()
	deadline := time.Now().Add(2 * engineCallTimeout)
	b, fail := s.startBox(ctx, modeOnce, "pool-"+NewID()[:12], preimport, deadline, s.opt.PoolMaxIdle)
	if fail != nil {
		return nil, fail
	}
	if err := s.waitReady(ctx, b, deadline); err != nil {
		s.destroy(ctx, b)
		r := s.engineFailure(ctx, err, deadline)
		return nil, &r
	}
	return b, nil
}

// closePool stops the refiller and destroys the waiting sandboxes (starts
// under way are destroyed as they finish: the server is stopping).
func (s *Sandbox) closePool() {
	p := s.pool
	if p == nil {
		return
	}
	<-p.done
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, b := range ready {
		s.destroy(context.Background(), b)
	}
}

// PoolReady reports how many pooled sandboxes, with their modules
// imported, wait for a call.
func (s *Sandbox) PoolReady() int {
	if s.pool == nil {
		return 0
	}
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	n := 0
	for _, b := range s.pool.ready {
		if !b.light {
			n++
		}
	}
	return n
}

// PoolFailing reports whether the pool's starts fail now (it backs off
// until one succeeds).
func (s *Sandbox) PoolFailing() bool {
	if s.pool == nil {
		return false
	}
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return s.pool.failing
}

// PoolStats reports the pool's size now (it follows demand), the
// sandboxes ready and starting, and the calls waiting for one.
func (s *Sandbox) PoolStats() (size, ready, starting, waiting int) {
	if s.pool == nil {
		return 0, 0, 0, 0
	}
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size, len(p.ready), p.starting, len(p.waiters)
}
