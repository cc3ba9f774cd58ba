package sandbox

import (
	"context"
	"sync"
	"time"
)

// DefaultPreImport are the modules a pooled sandbox imports ahead of time.
var DefaultPreImport = []string{"numpy", "pandas", "matplotlib.pyplot"}

// DefaultPoolMaxIdle is how long a pooled sandbox may wait before it is
// replaced by a fresh one.
const DefaultPoolMaxIdle = 5 * time.Minute

// pool keeps started sandboxes, each with Python up and the common modules
// imported, waiting for one call each. A sandbox taken from the pool serves
// exactly one call and is destroyed like any other; the pool refills in the
// background.
type pool struct {
	mu    sync.Mutex
	ready []*box
	wake  chan struct{}
	done  chan struct{}
	// lastMiss is when a call last found the pool empty. Under such load
	// the pool refills with light sandboxes (no pre-imports): importing
	// numpy, pandas and matplotlib for each would take the CPU the calls
	// need, and the engine's create rate bounds throughput either way.
	lastMiss time.Time
}

// loadWindow is how long after a miss the pool stays light.
const loadWindow = 3 * time.Second

// startPool starts the refiller when the pool is on.
func (s *Sandbox) startPool() {
	if s.opt.PoolSize <= 0 {
		return
	}
	s.pool = &pool{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.refill()
}

// takeWarm returns a ready pooled sandbox, or nil.
func (s *Sandbox) takeWarm() *box {
	p := s.pool
	if p == nil {
		return nil
	}
	defer p.poke()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready) > 0 {
		b := p.ready[0]
		p.ready = p.ready[1:]
		if !b.conn.alive() || time.Since(b.started) > s.opt.PoolMaxIdle {
			go s.destroy(context.Background(), b)
			continue
		}
		return b
	}
	p.lastMiss = time.Now()
	return nil
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// refill keeps the pool full, replaces sandboxes that waited too long, and
// backs off while the engine fails.
func (s *Sandbox) refill() {
	p := s.pool
	defer close(p.done)
	backoff := time.Second
	tick := time.NewTicker(max(s.opt.PoolMaxIdle/4, time.Second))
	defer tick.Stop()
	for {
		stale, short, loaded := p.prune(s.opt.PoolSize, s.opt.PoolMaxIdle)
		for _, b := range stale {
			s.destroy(context.Background(), b)
		}
		if short > 0 {
			b, err := s.prepare(!loaded)
			if err != nil {
				s.log.Debug().Err(err).Msg("preparing a pooled sandbox failed; retrying")
				select {
				case <-s.stop:
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 30*time.Second)
				continue
			}
			backoff = time.Second
			p.mu.Lock()
			select {
			case <-s.stop:
				p.mu.Unlock()
				s.destroy(context.Background(), b)
				return
			default:
			}
			p.ready = append(p.ready, b)
			p.mu.Unlock()
			continue
		}
		var lightDone <-chan time.Time
		if p.hasLight() {
			lightDone = time.After(loadWindow)
		}
		select {
		case <-s.stop:
			return
		case <-p.wake:
		case <-tick.C:
		case <-lightDone:
		}
	}
}

// prune drops the sandboxes that waited too long or died, and, once load
// has passed, a light one to make room for a full one. It says how many
// the pool is short and whether it is under load.
func (p *pool) prune(size int, maxIdle time.Duration) (stale []*box, short int, loaded bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fresh := p.ready[:0]
	for _, b := range p.ready {
		if time.Since(b.started) > maxIdle || !b.conn.alive() {
			stale = append(stale, b)
		} else {
			fresh = append(fresh, b)
		}
	}
	p.ready = fresh
	short = size - len(p.ready)
	loaded = time.Since(p.lastMiss) < loadWindow
	if !loaded && short == 0 {
		for i, b := range p.ready {
			if b.light {
				stale = append(stale, b)
				p.ready = append(p.ready[:i:i], p.ready[i+1:]...)
				short = 1
				break
			}
		}
	}
	return stale, short, loaded
}

// prepare starts a pooled sandbox and waits until it is ready for code.
func (s *Sandbox) prepare(preimport bool) (*box, error) {
	ctx := context.Background()
	deadline := time.Now().Add(2 * engineCallTimeout)
	b, fail := s.startBox(ctx, modeOnce, "pool-"+NewID()[:12], preimport, deadline, s.opt.PoolMaxIdle)
	if fail != nil {
		return nil, fail.Cause
	}
	if err := s.waitReady(ctx, b, deadline); err != nil {
		s.destroy(ctx, b)
		return nil, err
	}
	return b, nil
}

func (p *pool) hasLight() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.ready {
		if b.light {
			return true
		}
	}
	return false
}

// closePool stops the refiller and destroys the waiting sandboxes.
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
