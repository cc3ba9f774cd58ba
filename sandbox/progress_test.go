package sandbox

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pybox/pybox/redact"
)

// TestFakeProgress: a call that prints over time reports its newest lines
// in order, redacted, a heartbeat while it is silent, and nothing after
// its result; a session's calls report the same way.
func TestFakeProgress(t *testing.T) {
	token := "ghp_" + strings.Repeat("Pq7Rs8", 6)
	s, _ := newFake(t, Options{Redact: redact.MustNew(redact.Options{})})
	var script strings.Builder
	for i := range 6 {
		fmt.Fprintf(&script, "print line %d\nsleep 400ms\n", i)
	}
	fmt.Fprintf(&script, "print key %s\nsleep 3500ms\nprint last\n", token)
	var mu sync.Mutex
	var got []Progress
	returned := false
	late := false
	res := s.Run(context.Background(), Request{Code: script.String(), Timeout: 30 * time.Second, Progress: func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		if returned {
			late = true
		}
		got = append(got, p)
	}})
	mu.Lock()
	returned = true
	mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if res.ExitCode != 0 || late {
		t.Fatalf("exit %d, a report after the result: %v", res.ExitCode, late)
	}
	var all strings.Builder
	heartbeat := false
	for _, p := range got {
		all.WriteString(p.Output)
		if p.Output == "" && p.Phase == "running" {
			heartbeat = true
		}
		if len(p.Output) > ProgressOutputBytes {
			t.Errorf("a report of %d bytes", len(p.Output))
		}
	}
	text := all.String()
	if strings.Contains(text, token) || !strings.Contains(text, "key [REDACTED:") {
		t.Errorf("the token in the reports: %q", text)
	}
	last := -1
	for i := range 6 {
		at := strings.Index(text, fmt.Sprintf("line %d\n", i))
		if at < 0 || at < last {
			t.Errorf("line %d missing or out of order in %q", i, text)
		}
		last = at
	}
	if !heartbeat {
		t.Errorf("no heartbeat during 3.5 s of silence: %+v", got)
	}
}

// TestFakeProgressBudget: the reports show no more output than the
// result can hold.
func TestFakeProgressBudget(t *testing.T) {
	s, _ := newFake(t, Options{OutputLimit: 2048})
	var script strings.Builder
	for i := range 40 {
		fmt.Fprintf(&script, "print %s %03d\nsleep 260ms\n", strings.Repeat("x", 200), i)
	}
	shown := 0
	s.Run(context.Background(), Request{Code: script.String(), Timeout: 60 * time.Second, Progress: func(p Progress) {
		shown += len(p.Output)
	}})
	if shown == 0 || shown > 2*2048+ProgressOutputBytes {
		t.Errorf("the reports showed %d bytes of output for a 2048-byte limit per stream", shown)
	}
}
