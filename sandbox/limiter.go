package sandbox

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errBusy means the queue of waiting calls is full or a call waited in it
// for longer than allowed.
var errBusy = errors.New("too many calls at once")

// errDeadline means a call's own deadline passed while it waited.
var errDeadline = errors.New("the call's timeout passed while it waited")

// limiter lets at most n calls run at once and at most queue more wait.
type limiter struct {
	slots   chan struct{}
	maxWait time.Duration

	mu      sync.Mutex
	waiting int
	queue   int
	running int
	peak    int
}

func newLimiter(n, queue int, maxWait time.Duration) *limiter {
	return &limiter{slots: make(chan struct{}, n), queue: queue, maxWait: maxWait}
}

// acquire waits for a slot. It fails at once with errBusy when the queue is
// full, with errBusy after maxWait, with errDeadline at the call's
// deadline, and with ctx's error when ctx ends.
func (l *limiter) acquire(ctx context.Context, stop <-chan struct{}, deadline time.Time) error {
	select {
	case l.slots <- struct{}{}:
		l.started()
		return nil
	default:
	}
	l.mu.Lock()
	if l.waiting >= l.queue {
		l.mu.Unlock()
		return errBusy
	}
	l.waiting++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.waiting--
		l.mu.Unlock()
	}()
	wait, err := l.maxWait, errBusy
	if d := time.Until(deadline); d < wait {
		wait, err = d, errDeadline
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		l.started()
		return nil
	case <-t.C:
		return err
	case <-stop:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *limiter) started() {
	l.mu.Lock()
	l.running++
	l.peak = max(l.peak, l.running)
	l.mu.Unlock()
}

func (l *limiter) release() {
	l.mu.Lock()
	l.running--
	l.mu.Unlock()
	<-l.slots
}

// stats returns the calls running and waiting now, and the most that ever
// ran at once.
func (l *limiter) stats() (running, waiting, peak int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running, l.waiting, l.peak
}
