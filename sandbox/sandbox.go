package sandbox

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"
)

// runnerSource is the in-container runner, passed to python3 -c. The code
// to run arrives on stdin, never in argv.
//
//go:embed runner.py
var runnerSource string

// ErrorKind says why code did not run to its own end. The values are the
// contract's `error` field.
type ErrorKind string

// The error kinds of the contract, plus cancelled, which no client sees.
const (
	ErrNone               ErrorKind = ""
	ErrTimeout            ErrorKind = "timeout"
	ErrMemoryLimit        ErrorKind = "memory_limit"
	ErrInvalidInput       ErrorKind = "invalid_input"
	ErrSandboxUnavailable ErrorKind = "sandbox_unavailable"
	ErrTooManyRequests    ErrorKind = "too_many_requests"
	ErrSessionExpired     ErrorKind = "session_expired"
	// ErrSandboxLost: the sandbox was killed by something other than
	// pybox's own limits (the engine, its shutdown, an operator).
	ErrSandboxLost ErrorKind = "sandbox_lost"
	// ErrCancelled: the caller went away or the server is shutting down.
	ErrCancelled ErrorKind = "cancelled"
)

// Exit codes the sandbox reports on its own.
const (
	ExitTimeout  = 124
	ExitKilled   = 137
	ExitNotRun   = 1
	ExitInternal = 1
)

// errClosed means the sandbox is shutting down.
var errClosed = errors.New("sandbox is shutting down")

// Request is one call's code and its limits.
type Request struct {
	// Code is the Python source, run as the main module.
	Code string
	// Timeout bounds the whole call, from its arrival: waiting for a slot
	// or for a session's earlier call, starting a sandbox and running the
	// code. 0 means [DefaultTimeout].
	Timeout time.Duration
	// CallID labels the container and the logs; "" makes one up.
	CallID string
	// Files are written under /mnt/user-data before the code runs.
	Files []InputFile
	// Progress, when set, is called while the call runs: at least every
	// 3 s, and with the newest output as it comes (a few times a second
	// at most), never after the call returns. It must not block for long.
	Progress func(Progress)
}

// InputFile is a file for the code to read.
type InputFile struct {
	// Path is relative to /mnt/user-data.
	Path string
	Data []byte
}

// Result is what happened. It is data, never a Go error: every path, from
// a clean exit to a dead engine, fills the same fields. Stdout and Stderr
// are redacted by [Options.Redact].
type Result struct {
	Stdout   string
	Stderr   string
	ExitCode int
	// Duration is the wall clock of the code's run.
	Duration time.Duration
	Error    ErrorKind
	// Truncated is true when a stream passed the output limit.
	Truncated bool
	// StdoutBytes and StderrBytes count what the code wrote, kept or not.
	StdoutBytes, StderrBytes int64
	// Cause is the internal error behind Error, for the log only.
	Cause error
	// Files are the files the code left under /mnt/outputs.
	Files []OutputFile
	// Timing says where the call's time went.
	Timing Timing
	// Container is the id of the container the code ran in; "" when it
	// did not run.
	Container string
}

// Source is where a call's sandbox came from.
type Source string

// The sources of a call's sandbox.
const (
	SourceNone    Source = ""        // the code did not run
	SourcePool    Source = "pool"    // taken from the warm pool, or handed over by it
	SourceCold    Source = "cold"    // started for the call (no pool)
	SourceSession Source = "session" // the session's own
)

// Timing says where a call's time went, for the latency breakdown of
// `pybox bench` and for metrics. Nothing is decided on it. The parts follow
// each other: their sum is the call's time in the sandbox package.
type Timing struct {
	Source Source
	// Light is true for a pooled sandbox made without the pre-imports
	// (under load).
	Light bool
	// Queue is the wait for a slot, and in a session for its earlier call.
	Queue time.Duration
	// Acquire is taking a pooled sandbox (or waiting for one the pool is
	// starting), or starting one for the call.
	Acquire time.Duration
	// Transit is the call's way through the engine's attach stream, both
	// directions: the server's wait for the report, less the runner's own
	// time (Setup, Run, Finish).
	Transit time.Duration
	// Setup is the runner's time from the call's frame to the code's start
	// (the input files written).
	Setup time.Duration
	// Run is the code's own run (the Result's Duration).
	Run time.Duration
	// Finish is the runner's time from the code's end to its report: the
	// leftover processes stopped, the output drained, the files sent.
	Finish time.Duration
	// Collect is from the report's arrival to the Result, less Redact.
	Collect time.Duration
	// Redact is the redaction of the streams and output files.
	Redact time.Duration
}

// OutputFile is a file the code left under /mnt/outputs, as it leaves:
// redacted.
type OutputFile struct {
	// Path is relative to /mnt/outputs, redacted: a secret in a name is
	// replaced, and a name made the same as another's gets "-2".
	Path string
	Data []byte
	// MIMEType comes from pybox's own table of extensions, or from the
	// content: an image's from its bytes.
	MIMEType string
	// Text is true when Data is UTF-8 text (decoded from the file's own
	// encoding, then redacted); otherwise Data is the file's bytes with
	// each secret found starred in place.
	Text bool
}

// outputLimits bound what comes back from /mnt/outputs.
type outputLimits struct {
	files     int
	fileBytes int
	total     int
}

// Sandbox runs code in throwaway containers. It is safe for concurrent use.
type Sandbox struct {
	opt   resolved
	ctr   containers
	lst   lister
	probe prober
	imp   importer
	// closeEngine releases what the engine client holds; nil for none.
	closeEngine func() error
	// rlimitProcs is the runner's RLIMIT_NPROC, or 0.
	rlimitProcs int64
	// store keeps sessions for every replica, or is nil.
	store sessionStore
	log   zerolog.Logger
	owner string
	lim   *limiter
	uids  *uidPool

	stop     chan struct{}
	stopOnce sync.Once
	work     inflight // calls and removals under way

	mu     sync.Mutex
	active map[string]struct{} // container ids alive now
	// failed are the containers whose removal failed, retried by the
	// reconciler.
	failed map[string]time.Time
	// abandoned are the call ids of creates pybox stopped waiting for: the
	// engine may still make their containers, which never start.
	abandoned map[string]time.Time

	pool       *pool
	reconciled chan struct{} // closed when the reconciler has stopped
	counts     counters
}

// engineParts are the engine as each part of the package uses it.
type engineParts struct {
	ctr   containers
	lst   lister
	probe prober
	imp   importer
	close func() error
	// rlimitProcs: the engine has no pids limit, so the runner bounds the
	// sandbox's uid with RLIMIT_NPROC.
	rlimitProcs bool
	// store, when set, keeps sessions for every replica.
	store sessionStore
}

// New returns a Sandbox that talks to the Docker engine configured by the
// environment (DOCKER_HOST, DOCKER_CERT_PATH, ...). It does not contact the
// engine: a dead engine shows up in each [Result] until it comes back.
func New(opt Options, log zerolog.Logger) (*Sandbox, error) {
	if opt.Kubernetes != nil {
		return newKubernetes(opt, *opt.Kubernetes, log)
	}
	eng, err := newDockerEngine()
	if err != nil {
		return nil, err
	}
	return newSandbox(opt, engineParts{ctr: eng, lst: eng, probe: eng, imp: eng, close: eng.Close}, log)
}

func newSandbox(opt Options, eng engineParts, log zerolog.Logger) (*Sandbox, error) {
	r, err := opt.resolve()
	if err != nil {
		return nil, err
	}
	s := &Sandbox{
		opt:         r,
		ctr:         eng.ctr,
		lst:         eng.lst,
		probe:       eng.probe,
		imp:         eng.imp,
		closeEngine: eng.close,
		log:         log,
		owner:       ownerID(),
		lim:         newLimiter(r.MaxConcurrent, r.MaxQueue, r.QueueTimeout),
		uids:        newUIDPool(r.fixedUser, r.UIDBase, r.UIDCount),
		stop:        make(chan struct{}),
		active:      map[string]struct{}{},
		failed:      map[string]time.Time{},
		abandoned:   map[string]time.Time{},
		reconciled:  make(chan struct{}),
	}
	if eng.rlimitProcs {
		s.rlimitProcs = r.PidsLimit
	}
	s.store = eng.store
	s.startPool()
	go s.reconcile()
	return s, nil
}

// Image is the image the sandbox runs.
func (s *Sandbox) Image() string { return s.opt.Image }

// EngineHost is where the Docker client looks for the engine.
func (s *Sandbox) EngineHost() string { return s.ctr.Host() }

// Stats reports the calls running and waiting, and the most that ran at once.
func (s *Sandbox) Stats() (running, waiting, peak int) { return s.lim.stats() }

// Run runs req's code in a fresh container (a pooled one when the pool has
// one ready) and destroys it. It always returns a complete Result. When
// ctx ends (the client cancelled) the code is stopped and the Result's
// Error is [ErrCancelled].
func (s *Sandbox) Run(ctx context.Context, req Request) Result {
	return s.do(ctx, req, nil)
}

func failure(kind ErrorKind, cause error, msg string) Result {
	return Result{Stderr: msg + "\n", ExitCode: ExitNotRun, Error: kind, Cause: cause}
}

// do is the one path of every call, in a fresh, pooled or session sandbox:
// acquiring the sandbox is the only difference. The call's deadline runs
// from its arrival, and every wait counts against it.
func (s *Sandbox) do(ctx context.Context, req Request, se *Session) Result {
	arrival := time.Now()
	if req.CallID == "" {
		req.CallID = NewID()
	}
	if req.Timeout <= 0 {
		req.Timeout = DefaultTimeout
	}
	deadline := arrival.Add(req.Timeout)
	if err := s.checkFiles(req.Files); err != nil {
		return s.said(failure(ErrInvalidInput, err, "pybox: invalid input: "+err.Error()))
	}
	if !s.work.enter() {
		return failure(ErrCancelled, errClosed, "pybox: the server is shutting down; the code did not run.")
	}
	defer s.work.leave()
	pr := s.watch(req, arrival)
	defer pr.stop() // before the result is returned: no report follows it

	var b *box
	if se != nil {
		if res, ok := se.take(ctx, s.stop, deadline); !ok {
			return s.said(res)
		}
		defer se.give()
		b = se.b
		if se.shared != nil {
			if res, ok := se.attach(ctx, deadline); !ok {
				return s.said(res)
			}
			defer se.detach()
		}
		if !b.conn.alive() {
			// It died between calls (killed from outside, say).
			se.end(ctx, "its sandbox stopped between calls")
			_, why := se.Over()
			return s.said(expired(why))
		}
	}
	if err := s.lim.acquire(ctx, s.stop, deadline); err != nil {
		return s.said(s.notRun(err, time.Since(arrival)))
	}
	slot := time.Now()
	source := SourceSession
	if b == nil && s.pool != nil {
		source = SourcePool
		pr.setPhase("starting")
		var fail *Result
		if b, fail = s.takeWarm(ctx, deadline); b == nil {
			s.lim.release()
			switch {
			case fail != nil:
				return s.said(*fail)
			case ctx.Err() != nil:
				return failure(ErrCancelled, context.Cause(ctx), "pybox: the call was cancelled before it ran.")
			default:
				return failure(ErrCancelled, errClosed, "pybox: the server is shutting down; the code did not run.")
			}
		}
	}
	if b == nil {
		source = SourceCold
		pr.setPhase("starting")
		var fail *Result
		if b, fail = s.startBox(ctx, modeOnce, req.CallID, false, deadline, time.Until(deadline)); fail != nil {
			s.lim.release()
			return s.said(*fail)
		}
	}
	pr.running(b.id)
	res := s.exec(ctx, b, req, deadline, arrival, Timing{Source: source, Light: source == SourcePool && b.light, Queue: slot.Sub(arrival)}, pr.out())
	if source != SourceSession && s.pool != nil {
		// The refill starts once the call is over, not on its path: the
		// engine's work for a new sandbox would compete with the call's.
		s.pool.poke()
	}
	if se != nil {
		s.lim.release()
		if !b.conn.alive() {
			se.end(ctx, "its sandbox stopped")
			res.Stderr = appendNote(res.Stderr, "pybox: the session's sandbox has stopped, so the session has ended; start a new one with session_id \"new\".")
		}
		return res
	}
	// The result does not wait for the container's removal; the slot does,
	// so no more than MaxConcurrent call containers ever exist at once.
	if s.work.enter() {
		go func() {
			defer s.work.leave()
			defer s.lim.release()
			s.destroy(context.WithoutCancel(ctx), b)
		}()
	} else {
		s.lim.release()
		s.destroy(context.WithoutCancel(ctx), b)
	}
	return res
}

// notRun is the result of a call that got no slot.
func (s *Sandbox) notRun(err error, waited time.Duration) Result {
	switch {
	case errors.Is(err, errBusy):
		running, waiting, _ := s.lim.stats()
		return failure(ErrTooManyRequests, err, fmt.Sprintf(
			"pybox: too many calls at once (%d running, %d waiting; at most %d run together and %d wait); this call waited %s and the code did not run. Try again shortly.",
			running, waiting, s.opt.MaxConcurrent, s.opt.MaxQueue, waited.Round(time.Millisecond)))
	case errors.Is(err, errDeadline):
		return failure(ErrTooManyRequests, err, fmt.Sprintf(
			"pybox: the call's whole timeout (%s) passed while it waited for a free sandbox slot, so the code did not run. Try again shortly, or with a longer timeout.",
			waited.Round(time.Millisecond)))
	default:
		return failure(ErrCancelled, err, "pybox: the call was cancelled before it ran.")
	}
}

// exec runs one call in a started sandbox and shapes its result.
// Its timing starts from t's Source and Queue.
func (s *Sandbox) exec(ctx context.Context, b *box, req Request, deadline, arrival time.Time, t Timing, live *liveOut) Result {
	b.seq++
	out := newCallOut(b.seq, s.opt.OutputLimit, live)
	frame, err := encodeRun(b.seq, req, time.Until(deadline)+runnerMargin)
	if err != nil {
		return failure(ErrInvalidInput, err, "pybox: the code could not be encoded: "+err.Error())
	}
	if err := b.conn.begin(out); err != nil {
		return failure(ErrSandboxUnavailable, err, "pybox: "+err.Error())
	}
	handover := time.Now()
	out.handover = handover
	// Written in the background: a stalled engine blocks the write, and
	// the call's clock is the server's own.
	go func() {
		if err := b.conn.sendRaw(frame); err != nil {
			b.conn.close(fmt.Errorf("writing the call to the sandbox: %w", err))
		}
	}()
	reason := s.await(ctx, b, out, deadline)
	t.Acquire = handover.Sub(arrival) - t.Queue
	return s.outcome(ctx, b, out, reason, req, deadline, t, handover.Sub(arrival), time.Since(handover))
}

// Graces after asking a call to stop: together at most 2 s past its
// deadline, whatever the engine does.
const (
	// interruptGrace is how long a session's code may take to stop after
	// an interrupt, as after Ctrl-C, before its Python is restarted.
	interruptGrace = time.Second
	// stopGrace is how long the runner may take to stop the code and
	// send what it printed after a stop frame.
	stopGrace = 1500 * time.Millisecond
	// stuckCheck bounds the look at a sandbox whose runner did not answer.
	stuckCheck = 400 * time.Millisecond
)

// await waits for the call's end, or stops it at its deadline, on
// cancellation or at shutdown, and says which.
func (s *Sandbox) await(ctx context.Context, b *box, out *callOut, deadline time.Time) ErrorKind {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var reason ErrorKind
	select {
	case <-out.done:
		return ErrNone
	case <-b.conn.closed:
		return ErrNone
	case <-timer.C:
		reason = ErrTimeout
	case <-ctx.Done():
		reason = ErrCancelled
	case <-s.stop:
		reason = ErrCancelled
	}
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-out.done:
			return true
		case <-b.conn.closed:
			return true
		case <-t.C:
			return false
		}
	}
	// Frames go in the background: a write to a stalled engine blocks.
	send := func(typ byte) { go b.conn.send(typ, nil) }
	stop := stopGrace
	if b.mode == modeSession {
		// As Ctrl-C would: the code gets KeyboardInterrupt and a grace.
		send(frameInterrupt)
		if wait(interruptGrace) {
			return reason
		}
		stop = 2*time.Second - interruptGrace - stuckCheck
	}
	send(frameStop)
	if wait(stop) {
		return reason
	}
	// The runner does not answer: frozen from outside, or its engine
	// stalled. A brief look says which, before the sandbox is killed and
	// removed in the background.
	b.conn.close(errors.New("the sandbox did not answer a stop"))
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stuckCheck)
	st, err := s.ctr.Inspect(ictx, b.id)
	cancel()
	switch {
	case err == nil && st.Paused:
		b.stuck.Store(stuckPaused)
	default:
		b.stuck.Store(stuckSilent)
	}
	s.background(func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineCallTimeout)
		defer cancel()
		if err := s.ctr.Kill(kctx, b.id); err != nil {
			s.log.Warn().Str("container", shortID(b.id)).Err(err).Msg("killing a sandbox that did not stop failed; the reconciler removes it")
		}
	})
	return reason
}

// background runs f as work Close waits for, or now when Close has begun.
func (s *Sandbox) background(f func()) {
	if !s.work.enter() {
		f()
		return
	}
	go func() {
		defer s.work.leave()
		f()
	}()
}

// outcome turns what came back from the runner into the call's Result.
func (s *Sandbox) outcome(ctx context.Context, b *box, out *callOut, reason ErrorKind, req Request, deadline time.Time, t Timing, waited, elapsed time.Duration) (res Result) {
	collect := time.Now()
	var r *report
	defer func() { res.Timing = t.finished(r, out, collect) }()
	select {
	case <-out.done:
	default:
		// The stream ended or was closed: let the reader finish with this
		// call's output before it is read.
		b.conn.readerDone()
	}
	var files []OutputFile
	var fileNotes []fileNote
	r, files, fileNotes = b.conn.collected(out)
	redacting := time.Now()
	c := s.clean(ctx, out, files, deadline)
	t.Redact = time.Since(redacting)
	res = Result{Stdout: c.stdout, Stderr: c.stderr, Truncated: c.truncated, Files: c.files, Container: b.id}
	var refused []string
	for _, n := range fileNotes {
		refused = append(refused, s.noteName(n.name)+" "+n.why)
	}
	refused = append(refused, c.notes...)
	res.StdoutBytes, res.StderrBytes = out.stdout.Total(), out.stderr.Total()
	res.Duration = elapsed
	note := func(format string, a ...any) {
		res.Stderr = appendNote(res.Stderr, s.redact(fmt.Sprintf(format, a...)))
	}

	if r != nil {
		res.Duration = min(elapsed, time.Duration(r.Ran*float64(time.Second)))
		if r.RestartedBefore != "" {
			res.Stderr = appendNote("", s.redact(fmt.Sprintf("pybox: the session's Python process had ended since the last call (%s) and was restarted: variables and imports of earlier calls are gone; files are kept.", r.RestartedBefore))) + res.Stderr
		}
		if r.InputError != "" {
			res.Stderr = ""
			res.Files = nil
			res.Duration = 0
			res.ExitCode, res.Error = ExitNotRun, ErrInvalidInput
			note("pybox: the input files could not be written (%s), so the code did not run. Files of earlier calls of a session stay under /mnt/user-data until removed (os.remove) or replaced.", r.InputError)
			return res
		}
		switch {
		case r.Exit != nil:
			res.ExitCode = *r.Exit
		case r.Signal > 0:
			res.ExitCode = 128 + r.Signal
		default:
			res.ExitCode = ExitInternal
		}
		if r.Signal == 9 && r.OOMKills != nil && *r.OOMKills > 0 && !r.Stopped {
			res.ExitCode, res.Error = ExitKilled, ErrMemoryLimit
			note("pybox: the code was killed for using more than its %d MiB memory limit.", s.opt.MemoryBytes>>20)
		}
	}
	switch reason {
	case ErrTimeout:
		res.ExitCode, res.Error = ExitTimeout, ErrTimeout
		msg := fmt.Sprintf("pybox: the code was stopped after its %s timeout; stdout and stderr hold what it printed before that.", req.Timeout)
		if r != nil && r.Restarted == "" && r.Exit != nil && b.mode == modeSession {
			msg = fmt.Sprintf("pybox: the code was interrupted, as Ctrl-C would, after its %s timeout; the session goes on. stdout and stderr hold what it printed before that.", req.Timeout)
		}
		if waited >= 100*time.Millisecond {
			msg += fmt.Sprintf(" The timeout counts the whole call: it waited %s before the code started.", waited.Round(time.Millisecond))
		}
		note("%s", msg)
	case ErrCancelled:
		res.ExitCode, res.Error = ExitNotRun, ErrCancelled
		res.Cause = context.Cause(ctx)
	}
	switch {
	case r != nil:
	case b.stuck.Load() == stuckPaused:
		res.Error, res.Cause = ErrSandboxLost, errors.New("paused from outside")
		note("pybox: the sandbox was paused from outside pybox (`docker pause`), so the code could not finish; it was removed.")
	case b.stuck.Load() == stuckSilent:
		note("pybox: the sandbox did not answer when asked to stop (its engine at %s may be stalled); it is removed in the background.", s.ctr.Host())
	}
	if r == nil && reason == ErrNone {
		if b.dying.Load() {
			res.ExitCode, res.Error = ExitNotRun, ErrCancelled
			note("pybox: the sandbox was closed while the code ran (its session was ended, or the server is stopping).")
		} else {
			s.lost(ctx, b, &res)
		}
	}
	more := 0
	if r != nil {
		for _, f := range r.Skipped {
			refused = append(refused, fmt.Sprintf("%s left out: %s", s.noteName(f.Path), clip(f.Why, 200)))
		}
		more = r.SkippedCount - len(r.Skipped)
	}
	if len(refused) > maxFileNotes {
		more += len(refused) - maxFileNotes
		refused = refused[:maxFileNotes]
	}
	if more > 0 {
		refused = append(refused, fmt.Sprintf("%d more output files left out or withheld", more))
	}
	if len(refused) > 0 {
		note("pybox: %s.", strings.Join(refused, "; "))
	}
	if r != nil {
		s.noteProcesses(&res, r, b.mode == modeSession)
	}
	return res
}

// finished completes a call's timing from its report, once its Result is
// shaped; shaping began at collect.
func (t Timing) finished(r *report, out *callOut, collect time.Time) Timing {
	if r != nil {
		sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
		t.Setup, t.Run, t.Finish = sec(r.Setup), sec(r.Ran), sec(r.Finish)
		t.Transit = max(0, out.doneAt.Sub(out.handover)-t.Setup-t.Run-t.Finish)
		collect = out.doneAt
	}
	t.Collect = max(0, time.Since(collect)-t.Redact)
	return t
}

// noteProcesses says what became of the processes the code left behind,
// and of a session's Python process.
func (s *Sandbox) noteProcesses(res *Result, r *report, session bool) {
	plural := func(n int, one, many string) string {
		if n == 1 {
			return one
		}
		if strings.Contains(many, "%d") {
			return fmt.Sprintf(many, n)
		}
		return many
	}
	if r.Left > 0 {
		res.Stderr = appendNote(res.Stderr, "pybox: the code left "+plural(r.Left, "a process running; the call ended when its main program did, and the process was stopped.", "%d processes running; the call ended when its main program did, and they were stopped."))
	}
	if session && r.NewBackground > 0 {
		res.Stderr = appendNote(res.Stderr, "pybox: "+plural(r.NewBackground, "a process", "%d processes")+" the code started "+plural(r.NewBackground, "is", "are")+" still running in this session; the call ended with its main program (background processes keep running between calls, as in a notebook).")
	}
	switch r.Restarted {
	case "exited":
		if res.Error == ErrMemoryLimit {
			res.Stderr = appendNote(res.Stderr, "pybox: the session's Python process was restarted: variables and imports of earlier calls are gone; files are kept.")
		} else {
			how := fmt.Sprintf("exit status %d", res.ExitCode)
			if r.Signal > 0 {
				how = fmt.Sprintf("signal %d", r.Signal)
			}
			res.Stderr = appendNote(res.Stderr, "pybox: the session's Python process ended ("+how+") and was restarted: variables and imports of earlier calls are gone; files are kept.")
		}
	case "stopped":
		res.Stderr = appendNote(res.Stderr, "pybox: the code did not stop when interrupted, so the session's Python process was restarted: variables and imports of earlier calls are gone; files are kept.")
	case "malformed":
		res.Stderr = appendNote(res.Stderr, "pybox: the code wrote into pybox's status pipe, so its report could not be trusted and the session's Python process was restarted: variables and imports of earlier calls are gone; files are kept.")
	}
}

// historyWait bounds the wait for the engine's account of a sandbox's end.
const historyWait = 2 * time.Second

// lost says, from the engine, why a sandbox's runner went away in the
// middle of a call.
func (s *Sandbox) lost(ctx context.Context, b *box, res *Result) {
	note := func(format string, a ...any) {
		res.Stderr = appendNote(res.Stderr, s.redact(fmt.Sprintf(format, a...)))
	}
	cerr := b.conn.Err()
	if errors.Is(cerr, errProtocol) {
		s.background(func() { s.remove(context.WithoutCancel(ctx), b.id) })
		res.ExitCode, res.Error, res.Cause = ExitInternal, ErrSandboxLost, cerr
		note("pybox: the sandbox's output broke pybox's protocol, so it was stopped; stdout and stderr hold what came before.")
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyWait)
	h, err := s.ctr.History(hctx, b.id, b.started)
	cancel()
	switch {
	case err != nil && !h.Died && len(h.Kills) == 0:
		res.ExitCode, res.Error, res.Cause = ExitInternal, ErrSandboxLost, errors.Join(cerr, err)
		note("pybox: the connection to the sandbox broke and the engine at %s did not say why (it may have stopped or be restarting); stdout and stderr hold what came before.", s.ctr.Host())
	case h.OOM:
		res.ExitCode, res.Error = ExitKilled, ErrMemoryLimit
		note("pybox: the code was killed for using more than its %d MiB memory limit.", s.opt.MemoryBytes>>20)
	case len(h.Kills) > 0:
		res.ExitCode, res.Error, res.Cause = 128+h.Kills[len(h.Kills)-1], ErrSandboxLost, cerr
		if h.Died {
			res.ExitCode = h.ExitCode
		}
		if s.opt.Kubernetes != nil {
			note("pybox: the sandbox's pod was deleted or stopped from outside pybox (kubectl delete pod, an eviction, a node drain, or its deadline) while the code ran; stdout and stderr hold what came before.")
		} else {
			note("pybox: the sandbox was killed from outside pybox (%s) while the code ran; stdout and stderr hold what came before.", describeKills(h.Kills))
		}
	case !h.Died:
		res.ExitCode, res.Error, res.Cause = ExitInternal, ErrSandboxLost, cerr
		note("pybox: the connection to the sandbox broke and the engine did not report its end; stdout and stderr hold what came before.")
	case h.ExitCode > 128:
		// Nothing outside asked for it: the code itself killed the
		// sandbox's runner, which gVisor lets it do (runc does not).
		res.ExitCode = h.ExitCode
		note("pybox: the code killed the sandbox's runner (signal %d), which ended the sandbox; stdout and stderr hold what it printed before.", h.ExitCode-128)
	default:
		res.ExitCode, res.Error, res.Cause = h.ExitCode, ErrSandboxLost, cerr
		s.log.Warn().Str("container", shortID(b.id)).Int("exit_code", h.ExitCode).Str("runner_stderr", s.redact(b.conn.diagText())).Msg("a sandbox's runner stopped in the middle of a call")
		note("pybox: the sandbox's runner stopped (exit status %d) in the middle of the call; stdout and stderr hold what came before.", h.ExitCode)
	}
}

// describeKills names the signals sent from outside and who sends them.
func describeKills(sigs []int) string {
	names := map[int]string{9: "SIGKILL", 15: "SIGTERM", 2: "SIGINT", 1: "SIGHUP"}
	var parts []string
	for _, n := range sigs {
		name := names[n]
		if name == "" {
			name = fmt.Sprintf("signal %d", n)
		}
		if len(parts) == 0 || parts[len(parts)-1] != name {
			parts = append(parts, name)
		}
	}
	who := "an operator or the engine"
	switch strings.Join(parts, ",") {
	case "SIGKILL":
		who = "`docker kill` or `docker rm -f` send it"
	case "SIGTERM,SIGKILL", "SIGTERM":
		who = "`docker stop` and the engine's own shutdown send these"
	}
	return strings.Join(parts, ", then ") + ": " + who
}

// said redacts the message of a result that holds no output of the code,
// only pybox's own words (which may quote an engine's error).
func (s *Sandbox) said(res Result) Result {
	res.Stderr = s.redact(res.Stderr)
	return res
}

// redact applies the redactor to a message of pybox's own.
func (s *Sandbox) redact(msg string) string {
	if s.opt.Redact == nil {
		return msg
	}
	return s.opt.Redact.String(msg)
}

// appendNote adds a pybox line to a stream, on a line of its own.
func appendNote(stream, note string) string {
	if stream != "" && !strings.HasSuffix(stream, "\n") {
		stream += "\n"
	}
	return stream + note + "\n"
}

// engineFailure turns an engine error into a result that says what to do.
func (s *Sandbox) engineFailure(ctx context.Context, err error, deadline time.Time) Result {
	host := s.ctr.Host()
	switch {
	case ctx.Err() != nil:
		return failure(ErrCancelled, ctx.Err(), "pybox: the call was cancelled.")
	case !time.Now().Before(deadline) || errors.Is(err, context.DeadlineExceeded):
		return failure(ErrSandboxUnavailable, err, fmt.Sprintf(
			"pybox: the sandbox did not start within the call's timeout (the engine at %s was slow to answer), so the code did not run. Try again, or with a longer timeout; `pybox doctor` checks the engine.", host))
	case errors.Is(err, errImageMissing) && s.opt.Kubernetes != nil:
		return failure(ErrSandboxUnavailable, err, fmt.Sprintf(
			"pybox: the sandbox image %s is on no node of the Kubernetes cluster at %s, or cannot be pulled (%s). Load it onto the nodes or push it to a registry they pull from (deploy/kubernetes), and set --image-pull-policy; `pybox doctor --backend kubernetes` checks the setup.",
			s.opt.Image, host, clip(err.Error(), 300)))
	case isUnavailable(err) && s.opt.Kubernetes != nil:
		return failure(ErrSandboxUnavailable, err, fmt.Sprintf(
			"pybox: the Kubernetes cluster at %s did not answer, so the code did not run. Check the kubeconfig and that the API server is reachable from where pybox runs; `pybox doctor --backend kubernetes` says what is wrong. Calls work again as soon as it answers.",
			host))
	case s.opt.Kubernetes != nil:
		return failure(ErrSandboxUnavailable, err, fmt.Sprintf(
			"pybox: the Kubernetes cluster at %s refused to run the sandbox: %s. `pybox doctor --backend kubernetes` checks the setup.", host, clip(err.Error(), 600)))
	case errors.Is(err, errImageMissing):
		return failure(ErrSandboxUnavailable, err, fmt.Sprintf(
			"pybox: the sandbox image %s is not on the Docker engine at %s. Build it with `pybox image build` (Debian with debootstrap, as root), or `docker build -t %s sandbox/image` where images can be pulled; `pybox doctor` checks the setup.",
			s.opt.Image, host, s.opt.Image))
	case isUnavailable(err):
		return failure(ErrSandboxUnavailable, err, fmt.Sprintf(
			"pybox: the Docker engine at %s did not answer, so the code did not run. Start the engine (for example `sudo systemctl start docker`, or `sudo scripts/ensure-docker.sh` in the pybox repository) or point DOCKER_HOST at one; `pybox doctor` says what is wrong. Calls work again as soon as it answers.",
			host))
	default:
		return failure(ErrSandboxUnavailable, err, fmt.Sprintf(
			"pybox: the Docker engine at %s refused to run the sandbox: %s. `pybox doctor` checks the setup.", host, clip(err.Error(), 600)))
	}
}

// Close stops new calls, stops the running ones and removes every
// container this server made. It waits for that until ctx ends.
func (s *Sandbox) Close(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.closePool()
	<-s.reconciled
	select {
	case <-s.work.close():
	case <-ctx.Done():
	}
	s.mu.Lock()
	left := make([]string, 0, len(s.active))
	for id := range s.active {
		left = append(left, id)
	}
	s.mu.Unlock()
	var errs []error
	for _, id := range left {
		if err := s.remove(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	// Anything of ours that the engine made after we stopped tracking.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if cs, err := s.lst.List(lctx, map[string]string{LabelManaged: "true", LabelOwner: s.owner}); err == nil {
		for _, c := range cs {
			if err := s.counts.removal(s.lst.Remove(lctx, c.ID)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if s.closeEngine != nil {
		errs = append(errs, s.closeEngine())
	}
	return errors.Join(errs...)
}

// inflight counts the work under way and lets Close wait for it. Unlike
// a WaitGroup, entering after the close is refused rather than a race.
type inflight struct {
	mu     sync.Mutex
	n      int
	closed bool
	zero   chan struct{}
}

// enter counts one more piece of work, unless the count is closed.
func (f *inflight) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.n++
	return true
}

func (f *inflight) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 && f.zero != nil {
		close(f.zero)
		f.zero = nil
	}
}

// close refuses new work and returns a channel closed when none is left.
func (f *inflight) close() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	ch := make(chan struct{})
	if f.n == 0 {
		close(ch)
	} else if f.zero == nil {
		f.zero = ch
	} else {
		ch = f.zero
	}
	return ch
}

// NewID returns a random identifier of 128 bits, hex-encoded.
func NewID() string {
	var b [16]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported systems
	}
	return hex.EncodeToString(b[:])
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// clip shortens an engine's message (which may quote a whole seccomp
// profile) to about n bytes, on a character boundary.
// The notes on output files left out are bounded like the output: at
// most maxFileNotes, each name cut to noteNameBytes.
const (
	maxFileNotes  = 20
	noteNameBytes = 160
)

// noteName is an output file's name as a note shows it: redacted, then
// cut short (cut first, a secret could be left too short to be found).
// A name with characters that are not printable is shown quoted.
func (s *Sandbox) noteName(name string) string {
	n := s.redact(name)
	if !utf8.ValidString(n) || strings.IndexFunc(n, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		n = strconv.Quote(n)
	}
	return clip(n, noteNameBytes)
}

func clip(msg string, n int) string {
	if len(msg) <= n {
		return msg
	}
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n] + " [...]"
}
