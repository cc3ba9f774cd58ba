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
func (s *Sandbox) takeWarm() *warm {
	p := s.pool
	if p == nil {
		return nil
	}
	defer p.poke()
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		if len(p.ready) == 0 {
			p.lastMiss = time.Now()
		}
	}()
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
		loaded := time.Since(p.lastMiss) < loadWindow
		if !loaded && short == 0 {
			// Load has passed: trade a light sandbox for a full one.
			for i, w := range p.ready {
				if w.light {
					stale = append(stale, w)
					p.ready = append(p.ready[:i:i], p.ready[i+1:]...)
					short = 1
					break
				}
			}
		}
		p.mu.Unlock()
		for _, w := range stale {
			s.discard(w)
		}
		if short > 0 {
			w, fail := s.prepareSandbox(context.Background(), "pool-"+NewID()[:12], true, !loaded)
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
		wait := tick.C
		var lightDone <-chan time.Time
		if p.hasLight() {
			lightDone = time.After(loadWindow)
		}
		select {
		case <-s.stop:
			return
		case <-p.wake:
		case <-wait:
		case <-lightDone:
		}
	}
}

func (p *pool) hasLight() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.ready {
		if w.light {
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
	for _, w := range ready {
		s.discard(w)
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
	for _, w := range s.pool.ready {
		if !w.light {
			n++
		}
	}
	return n
}
