package sandbox

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Progress is what a call reports while it runs, for a client to show and
// so that a client which waits only as long as it hears something keeps
// waiting.
type Progress struct {
	// Elapsed is the time since the call arrived.
	Elapsed time.Duration
	// Phase is "waiting" (for a free slot, or for a session's earlier
	// call), "starting" (the sandbox) or "running" (the code).
	Phase string
	// Output is the newest output of the code, both streams as they came:
	// whole lines (or a line the code left unfinished for a second),
	// redacted, at most ProgressOutputBytes; "" when nothing new came
	// since the last report.
	Output string
	// OutputBytes is what the code has printed so far, on both streams.
	OutputBytes int64
	// Container is the id of the container that runs the code, once the
	// phase is "running".
	Container string
}

// Progress reporting.
const (
	// ProgressOutputBytes bounds the output in one report.
	ProgressOutputBytes = 1 << 10
	// progressHeartbeat is the longest silence between two reports.
	progressHeartbeat = 3 * time.Second
	// progressMinInterval spaces reports of new output: a few a second.
	progressMinInterval = 250 * time.Millisecond
	// liveWindow is the newest output kept for the reports: redacted
	// whole, so that a secret is seen whole before lines are cut from it.
	liveWindow = 16 << 10
	// unfinishedLine is how long a line without its newline waits before
	// it is shown (a progress bar, a prompt): a line cut in the middle
	// could show the start of a secret the redactor sees only whole.
	unfinishedLine = time.Second
)

// liveOut keeps the newest output of a call for its progress reports.
type liveOut struct {
	mu    sync.Mutex
	buf   []byte
	total int64
	last  time.Time // when output last came
}

func (l *liveOut) Write(p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total += int64(len(p))
	l.last = time.Now()
	l.buf = append(l.buf, p...)
	if len(l.buf) > 2*liveWindow {
		l.buf = append(l.buf[:0], l.buf[len(l.buf)-liveWindow:]...)
	}
}

// snapshot returns the newest output, at most liveWindow bytes, its total
// and when output last came.
func (l *liveOut) snapshot() ([]byte, int64, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buf
	if len(b) > liveWindow {
		b = b[len(b)-liveWindow:]
	}
	return append([]byte(nil), b...), l.total, l.last
}

// progress reports on one call to req.Progress until stopped. Reports
// come from one goroutine, one at a time; stop returns once the last is
// done, so that none follows the call's result.
type progress struct {
	s       *Sandbox
	report  func(Progress)
	arrival time.Time
	live    *liveOut
	budget  int64 // output bytes the reports may still show

	mu        sync.Mutex
	phase     string
	container string

	stopc chan struct{}
	done  chan struct{}
}

// watch starts the reports of a call, or returns nil when it wants none.
func (s *Sandbox) watch(req Request, arrival time.Time) *progress {
	if req.Progress == nil {
		return nil
	}
	p := &progress{s: s, report: req.Progress, arrival: arrival, live: &liveOut{}, phase: "waiting",
		// No more output than the result can hold: both streams' limits.
		budget: 2 * int64(s.opt.OutputLimit),
		stopc:  make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

// setPhase records what the call is doing; nil-safe.
func (p *progress) setPhase(phase string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.phase = phase
	p.mu.Unlock()
}

// running records that the code runs in a container; nil-safe.
func (p *progress) running(container string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.phase, p.container = "running", container
	p.mu.Unlock()
}

// out is where the code's output is copied for the reports; nil-safe.
func (p *progress) out() *liveOut {
	if p == nil {
		return nil
	}
	return p.live
}

// stop ends the reports and waits for the one under way; nil-safe.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.stopc)
	<-p.done
}

func (p *progress) loop() {
	defer close(p.done)
	t := time.NewTicker(progressMinInterval)
	defer t.Stop()
	var lastSent time.Time
	var shownUpTo int64 // output bytes already shown
	for {
		select {
		case <-p.stopc:
			return
		case <-t.C:
		}
		now := time.Now()
		b, total, lastOut := p.live.snapshot()
		var text string
		var upTo int64
		if total > shownUpTo && p.budget > 0 {
			text, upTo = p.fresh(b, total, shownUpTo, now.Sub(lastOut) >= unfinishedLine)
		}
		if text == "" && now.Sub(lastSent) < progressHeartbeat {
			continue
		}
		if text != "" {
			if int64(len(text)) > p.budget {
				text = string(trimIncompleteStart([]byte(text[int64(len(text))-p.budget:])))
			}
			p.budget -= int64(len(text))
			shownUpTo = upTo
		}
		p.mu.Lock()
		phase, container := p.phase, p.container
		p.mu.Unlock()
		select {
		case <-p.stopc:
			return
		default:
		}
		p.report(Progress{Elapsed: now.Sub(p.arrival), Phase: phase, Output: text, OutputBytes: total, Container: container})
		lastSent = now
	}
}

// fresh returns a report's output, the whole lines that came since
// shownUpTo, and the total it shows up to. An unfinished line counts once
// settled. A private key's lines are held back until its end line has
// come, since the redactor sees a key only whole.
func (p *progress) fresh(b []byte, total, shownUpTo int64, settled bool) (string, int64) {
	end := len(b)
	if !settled {
		end = bytes.LastIndexByte(b, '\n') + 1
	}
	if i := bytes.LastIndex(b[:end], []byte("-----BEGIN")); i >= 0 && !bytes.Contains(b[i:end], []byte("-----END")) {
		end = i
	}
	upTo := total - int64(len(b)-end)
	if upTo <= shownUpTo {
		return "", shownUpTo
	}
	return p.newest(b[:end], upTo-shownUpTo), upTo
}

// newest returns the newest lines of the fresh bytes at the end of b,
// redacted, at most ProgressOutputBytes.
func (p *progress) newest(b []byte, fresh int64) string {
	from := len(b) - int(min(fresh, int64(len(b))))
	text := p.s.redact(validUTF8(string(b[from:])))
	if len(text) > ProgressOutputBytes {
		cut := len(text) - ProgressOutputBytes
		if i := strings.IndexByte(text[cut:], '\n'); i >= 0 && cut+i+1 < len(text) {
			cut += i + 1
		}
		text = string(trimIncompleteStart([]byte(text[cut:])))
	}
	return text
}

// describe is a report's message when it has no new output.
func (pr Progress) describe() string {
	switch pr.Phase {
	case "waiting":
		return fmt.Sprintf("pybox: waiting for a free sandbox (%.0f s)", pr.Elapsed.Seconds())
	case "starting":
		return fmt.Sprintf("pybox: starting the sandbox (%.0f s)", pr.Elapsed.Seconds())
	}
	return fmt.Sprintf("pybox: running (%.0f s, %d bytes of output so far)", pr.Elapsed.Seconds(), pr.OutputBytes)
}

// Message is the text a client shows for the report: the newest output,
// or what the call is doing.
func (pr Progress) Message() string {
	if pr.Output != "" {
		return pr.Output
	}
	return pr.describe()
}
