package sandbox

import "sync/atomic"

// Counters are a Sandbox's totals since New, for metrics. Each only grows.
type Counters struct {
	// Created counts the containers (or pods) the engine made for pybox:
	// for calls, sessions and the pool.
	Created int64
	// Removed counts those removed by pybox, and the ones left by a dead
	// server that it removed.
	Removed int64
	// RemoveFailures counts removals the engine refused or did not answer;
	// each is tried again by the reconciler.
	RemoveFailures int64
	// StartFailures counts sandboxes that could not be made or started.
	StartFailures int64
	// PoolHits counts calls that found a pooled sandbox ready; PoolMisses
	// those that waited for one to start.
	PoolHits, PoolMisses int64
}

// counters are the live totals behind Counters.
type counters struct {
	created, removed, removeFailures, startFailures, poolHits, poolMisses atomic.Int64
}

// Counters returns the sandbox's totals since New.
func (s *Sandbox) Counters() Counters {
	c := &s.counts
	return Counters{
		Created: c.created.Load(), Removed: c.removed.Load(), RemoveFailures: c.removeFailures.Load(),
		StartFailures: c.startFailures.Load(), PoolHits: c.poolHits.Load(), PoolMisses: c.poolMisses.Load(),
	}
}

// removal counts one removal's outcome and passes its error on.
func (c *counters) removal(err error) error {
	if err != nil {
		c.removeFailures.Add(1)
	} else {
		c.removed.Add(1)
	}
	return err
}
