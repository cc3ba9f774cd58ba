package sandbox

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	stop := make(chan struct{})
	far := time.Now().Add(time.Hour)
	l := newLimiter(1, 1, 200*time.Millisecond)
	if err := l.acquire(context.Background(), stop, far); err != nil {
		t.Fatalf("first acquire: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- l.acquire(context.Background(), stop, far) }()
	time.Sleep(50 * time.Millisecond)
	if err := l.acquire(context.Background(), stop, far); !errors.Is(err, errBusy) {
		t.Errorf("acquire with a full queue = %v; want errBusy", err)
	}
	if err := <-waited; !errors.Is(err, errBusy) {
		t.Errorf("acquire past maxWait = %v; want errBusy", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if err := l.acquire(ctx, stop, far); !errors.Is(err, context.Canceled) {
		t.Errorf("acquire with a cancelled ctx = %v; want context.Canceled", err)
	}
	// A call's own deadline, nearer than maxWait, ends its wait.
	if err := l.acquire(context.Background(), stop, time.Now().Add(30*time.Millisecond)); !errors.Is(err, errDeadline) {
		t.Errorf("acquire past the call's deadline = %v; want errDeadline", err)
	}
	l.release()
	if err := l.acquire(context.Background(), stop, far); err != nil {
		t.Errorf("acquire after release = %v", err)
	}
	if _, _, peak := l.stats(); peak != 1 {
		t.Errorf("peak = %d; want 1", peak)
	}
}
