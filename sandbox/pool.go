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
	ready []*warm
	wake  chan struct{}
	done  chan struct{}
}

// startPool starts the refiller when the pool is on.
func (s *Sandbox) startPool() {
	if s.opt.PoolSize <= 0 {
		return
	}
	s.pool = &pool{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.refill()
}

// takeWarm returns a ready pooled sandbox, or nil.
func (s *Sandbox) takeWarm() *warm {
	p := s.pool
	if p == nil {
		return nil
	}
	defer p.poke()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready) > 0 {
		w := p.ready[0]
		p.ready = p.ready[1:]
		select {
		case <-w.copied: // it died while waiting
			go s.discard(w)
			continue
		default:
		}
		if time.Since(w.born) > s.opt.PoolMaxIdle {
			go s.discard(w)
			continue
		}
		return w
	}
	return nil
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (s *Sandbox) discard(w *warm) {
	w.st.Close()
	s.remove(context.Background(), w.id)
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
		p.mu.Lock()
		var stale []*warm
		fresh := p.ready[:0]
		for _, w := range p.ready {
			if time.Since(w.born) > s.opt.PoolMaxIdle {
				stale = append(stale, w)
			} else {
				fresh = append(fresh, w)
			}
		}
		p.ready = fresh
		short := s.opt.PoolSize - len(p.ready)
		p.mu.Unlock()
		for _, w := range stale {
			s.discard(w)
		}
		if short > 0 {
			w, fail := s.prepare(context.Background(), "pool-"+NewID()[:12], true)
			if fail != nil {
				s.log.Debug().Err(fail.Cause).Msg("preparing a pooled sandbox failed; retrying")
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
				s.discard(w)
				return
			default:
			}
			p.ready = append(p.ready, w)
			p.mu.Unlock()
			continue
		}
		select {
		case <-s.stop:
			return
		case <-p.wake:
		case <-tick.C:
		}
	}
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
	for _, w := range ready {
		s.discard(w)
	}
}

// PoolReady reports how many pooled sandboxes wait for a call.
func (s *Sandbox) PoolReady() int {
	if s.pool == nil {
		return 0
	}
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return len(s.pool.ready)
}
