package sandbox

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
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
	// Timeout is the wall-clock limit; 0 means [DefaultTimeout].
	Timeout time.Duration
	// CallID labels the container and the logs; "" makes one up.
	CallID string
	// Files are written under /mnt/user-data before the code runs,
	// read-only to it.
	Files []InputFile
}

// InputFile is a file for the code to read.
type InputFile struct {
	// Path is relative to /mnt/user-data.
	Path string
	Data []byte
}

// Result is what happened. It is data, never a Go error: every path, from
// a clean exit to a dead engine, fills the same fields.
type Result struct {
	Stdout   string
	Stderr   string
	ExitCode int
	// Duration is the wall clock of the code's run, from the moment the
	// code was handed over.
	Duration time.Duration
	Error    ErrorKind
	// Truncated is true when a stream passed the output limit.
	Truncated bool
	// StdoutBytes and StderrBytes count what the code wrote, kept or not.
	StdoutBytes, StderrBytes int64
	// Cause is the internal error behind Error, for the log only.
	Cause error
	// ContainerID is the container that ran the code, if one was made.
	ContainerID string
	// Files are the files the code left under /mnt/outputs.
	Files []OutputFile
	// FileNotes say which output files were left out and why.
	FileNotes []string
}

// Sandbox runs code in throwaway containers. It is safe for concurrent use.
type Sandbox struct {
	opt   resolved
	eng   engine
	log   zerolog.Logger
	owner string
	lim   *limiter

	stop     chan struct{}
	stopOnce sync.Once
	runs     sync.WaitGroup

	mu     sync.Mutex
	active map[string]struct{} // container ids alive now

	pool *pool
}

// New returns a Sandbox that talks to the Docker engine configured by the
// environment (DOCKER_HOST, DOCKER_CERT_PATH, ...). It does not contact the
// engine: a dead engine shows up in each [Result] until it comes back.
func New(opt Options, log zerolog.Logger) (*Sandbox, error) {
	eng, err := newDockerEngine()
	if err != nil {
		return nil, err
	}
	return newSandbox(opt, eng, log)
}

func newSandbox(opt Options, eng engine, log zerolog.Logger) (*Sandbox, error) {
	r, err := opt.resolve()
	if err != nil {
		return nil, err
	}
	s := &Sandbox{
		opt:    r,
		eng:    eng,
		log:    log,
		owner:  ownerID(),
		lim:    newLimiter(r.MaxConcurrent, r.MaxQueue, r.QueueTimeout),
		stop:   make(chan struct{}),
		active: map[string]struct{}{},
	}
	s.startPool()
	return s, nil
}

// Owner is the value of the [LabelOwner] label on this server's containers.
func (s *Sandbox) Owner() string { return s.owner }

// Image is the image the sandbox runs.
func (s *Sandbox) Image() string { return s.opt.Image }

// EngineHost is where the Docker client looks for the engine.
func (s *Sandbox) EngineHost() string { return s.eng.Host() }

// Stats reports the calls running and waiting, and the most that ran at once.
func (s *Sandbox) Stats() (running, waiting, peak int) { return s.lim.stats() }

// Run runs req's code in a fresh container and destroys it. It always
// returns a complete Result. When ctx ends (the client cancelled) the
// container is killed and removed and the Result's Error is [ErrCancelled].
func (s *Sandbox) Run(ctx context.Context, req Request) Result {
	start := time.Now()
	if req.CallID == "" {
		req.CallID = NewID()
	}
	if req.Timeout <= 0 {
		req.Timeout = DefaultTimeout
	}
	select {
	case <-s.stop:
		return failure(ErrCancelled, errClosed, "pybox: the server is shutting down; the code did not run.")
	default:
	}
	if err := s.checkFiles(req.Files); err != nil {
		return failure(ErrInvalidInput, err, "pybox: invalid input: "+err.Error())
	}
	s.runs.Add(1)
	defer s.runs.Done()

	if err := s.lim.acquire(ctx, s.stop); err != nil {
		switch {
		case errors.Is(err, errBusy):
			running, waiting, _ := s.lim.stats()
			return failure(ErrTooManyRequests, err, fmt.Sprintf(
				"pybox: too many calls at once (%d running, %d waiting; at most %d run together and %d wait, for up to %s). The code did not run; try again shortly.",
				running, waiting, s.opt.MaxConcurrent, s.opt.MaxQueue, s.opt.QueueTimeout))
		default:
			return failure(ErrCancelled, err, "pybox: the call was cancelled before it ran.")
		}
	}
	res := s.run(ctx, req)
	if res.Duration == 0 && res.Error != ErrNone {
		res.Duration = time.Since(start)
	}
	return res
}

func failure(kind ErrorKind, cause error, msg string) Result {
	return Result{Stderr: msg, ExitCode: ExitNotRun, Error: kind, Cause: cause}
}

// run does one call once it holds a slot, and gives the slot back when the
// call's container is gone.
func (s *Sandbox) run(ctx context.Context, req Request) (res Result) {
	w := s.takeWarm()
	if w == nil {
		var fail *Result
		if w, fail = s.prepare(ctx, req.CallID, false); fail != nil {
			s.lim.release()
			return *fail
		}
	}
	res = s.execute(ctx, w, req)
	// The result does not wait for the container's removal; the slot does,
	// so no more than MaxConcurrent call containers ever exist at once.
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		defer s.lim.release()
		w.st.Close()
		s.remove(context.WithoutCancel(ctx), w.id)
	}()
	return res
}

// warm is a started sandbox waiting for one call's code.
type warm struct {
	id     string
	st     stream
	dm     *demux
	copied chan error
	born   time.Time
	// light sandboxes were made without the pre-imports, under load.
	light bool
}

// prepare makes a started sandbox. With wait, it returns once the sandbox
// is ready for code (its modules imported); otherwise at once.
func (s *Sandbox) prepare(ctx context.Context, callID string, wait bool) (*warm, *Result) {
	return s.prepareSandbox(ctx, callID, wait, wait)
}

func (s *Sandbox) prepareSandbox(ctx context.Context, callID string, wait, preimport bool) (*warm, *Result) {
	spec := s.containerSpec(callID)
	if preimport && len(s.opt.PreImport) > 0 {
		spec.Env = append(spec.Env, "PYBOX_PREIMPORT="+strings.Join(s.opt.PreImport, ","))
	}
	fail := func(r Result) (*warm, *Result) { return nil, &r }
	cctx, cancel := context.WithTimeout(ctx, engineCallTimeout)
	id, err := s.eng.Create(cctx, spec)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			// The engine may have made it after we stopped waiting.
			s.removeByCall(ctx, callID)
			return fail(failure(ErrCancelled, ctx.Err(), "pybox: the call was cancelled before it ran."))
		}
		return fail(s.engineFailure(ctx, err))
	}
	s.track(id)
	undo := func(r Result) (*warm, *Result) {
		s.remove(ctx, id)
		return fail(r)
	}
	lctx, cancel := context.WithTimeout(ctx, engineCallTimeout)
	st, dm, copied, err := s.launch(lctx, id)
	cancel()
	if err != nil {
		return undo(s.engineFailure(ctx, err))
	}
	w := &warm{id: id, st: st, dm: dm, copied: copied, born: time.Now(), light: !preimport}
	if wait {
		select {
		case <-w.dm.ready:
		case <-w.copied:
			return undo(failure(ErrSandboxUnavailable, errors.New("the sandbox stopped while it prepared"), "pybox: a sandbox stopped while it prepared."))
		case <-time.After(2 * engineCallTimeout):
			st.Close()
			return undo(failure(ErrSandboxUnavailable, errors.New("the sandbox was not ready in time"), "pybox: a sandbox was not ready in time."))
		}
	}
	return w, nil
}

// launch starts a created container with its streams read by a new demux,
// and tells the runner it may begin: it writes nothing before that line.
func (s *Sandbox) launch(ctx context.Context, id string) (stream, *demux, chan error, error) {
	st, err := s.eng.Launch(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	dm := s.newDemux()
	copied := make(chan error, 1)
	go func() { copied <- st.Demux(dm.Stdout(), dm.Stderr()) }()
	if _, err := st.Stdin().Write([]byte("{\"op\": \"attached\"}\n")); err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	return st, dm, copied, nil
}

// execute runs one call's code in a started sandbox.
func (s *Sandbox) execute(ctx context.Context, w *warm, req Request) (res Result) {
	id, st, dm, copied := w.id, w.st, w.dm, w.copied
	res.ContainerID = id
	payload, err := encodeRequest(req)
	if err != nil {
		return failure(ErrInvalidInput, err, "pybox: the code could not be encoded: "+err.Error())
	}
	handover := time.Now()
	go func() {
		// A container that died at once stops reading; Close unblocks us.
		if _, err := st.Stdin().Write(payload); err == nil {
			_ = st.CloseStdin()
		}
	}()

	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	var reason ErrorKind
	var call *callOut
	select {
	case call = <-dm.done:
		// Both streams ended with the supervisor's marker: the call is
		// complete, whether or not the container has gone yet.
	case err := <-copied:
		if err != nil {
			select {
			case call = <-dm.done:
			default:
				s.log.Warn().Str("call", req.CallID).Err(err).Msg("reading the sandbox's output failed")
				return failure(ErrSandboxUnavailable, err, "pybox: the connection to the sandbox's output broke ("+err.Error()+"); the code may not have run. Try again.")
			}
		}
	case <-timer.C:
		reason = ErrTimeout
	case <-ctx.Done():
		reason = ErrCancelled
	case <-s.stop:
		reason = ErrCancelled
	}
	res.Duration = time.Since(handover)

	if reason != ErrNone {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineCallTimeout)
		if err := s.eng.Kill(kctx, id); err != nil {
			s.log.Warn().Str("call", req.CallID).Err(err).Msg("killing container failed")
		}
		cancel()
		// Output written before the kill may still be in flight.
		select {
		case <-copied:
		case <-time.After(killGrace):
			st.Close()
		}
	}

	if call == nil {
		dm.release()
		select {
		case call = <-dm.done:
		default:
			call = dm.current()
		}
	}
	tr := call.trailer
	s.collect(call, &res)

	switch reason {
	case ErrTimeout:
		res.ExitCode = ExitTimeout
		res.Error = ErrTimeout
		res.Stderr = appendNote(res.Stderr, fmt.Sprintf(
			"pybox: the code was stopped after its %s timeout; stdout and stderr hold what it printed before that.", req.Timeout))
		return res
	case ErrCancelled:
		res.ExitCode = ExitNotRun
		res.Error = ErrCancelled
		res.Cause = context.Cause(ctx)
		return res
	}

	noteFiles(&res)
	if tr != nil && tr.ExitCode != nil && *tr.ExitCode != ExitKilled {
		// The supervisor's word is enough; no engine call on the fast path.
		res.ExitCode = *tr.ExitCode
		return res
	}
	// The code died by a signal or the container ended without a trailer:
	// the engine says whether memory killed it.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineCallTimeout)
	defer cancel()
	code, werr := s.eng.Wait(wctx, id)
	state, ierr := s.eng.Inspect(wctx, id)
	switch {
	case ierr == nil:
		res.ExitCode = state.ExitCode
	case werr == nil:
		res.ExitCode = code
	default:
		return s.engineFailure(ctx, errors.Join(werr, ierr))
	}
	oom := state.OOMKilled || tr.memoryKilled()
	if tr != nil && tr.ExitCode != nil && !oom {
		res.ExitCode = *tr.ExitCode
	}
	if oom || (res.ExitCode == ExitKilled && s.opt.Runtime == "runsc") {
		res.ExitCode = ExitKilled
		res.Error = ErrMemoryLimit
		res.Stderr = appendNote(res.Stderr, fmt.Sprintf(
			"pybox: the code was killed for using more than its %d MiB memory limit.", s.opt.MemoryBytes>>20))
	}
	return res
}

// newDemux makes the reader of a container's streams, one capped and
// redacted pair of writers per call.
func (s *Sandbox) newDemux() *demux {
	return newDemux(s.opt.MaxOutputBytes+(1<<20), func() *callOut {
		return &callOut{stdout: newCapWriter(s.opt.OutputLimit, s.opt.Redact), stderr: newCapWriter(s.opt.OutputLimit, s.opt.Redact)}
	})
}

func (s *Sandbox) outputLimits() outputLimits {
	return outputLimits{files: s.opt.MaxOutputFiles, fileBytes: s.opt.MaxOutputFileBytes, total: s.opt.MaxOutputBytes}
}

// encodeRequest is the runner's request line for one call.
func encodeRequest(req Request) ([]byte, error) {
	files := make([]map[string]any, 0, len(req.Files))
	for _, f := range req.Files {
		files = append(files, map[string]any{"path": f.Path, "data": f.Data})
	}
	payload, err := json.Marshal(map[string]any{"code": req.Code, "files": files})
	return append(payload, '\n'), err
}

// collect puts a call's output, as kept, redacted and checked, in res.
func (s *Sandbox) collect(call *callOut, res *Result) {
	res.Files, res.FileNotes = call.files(s.outputLimits())
	res.Stdout, res.Truncated = call.stdout.Text()
	var errTrunc bool
	res.Stderr, errTrunc = call.stderr.Text()
	res.Truncated = res.Truncated || errTrunc
	res.StdoutBytes, res.StderrBytes = call.stdout.Total(), call.stderr.Total()
}

// noteFiles says in stderr which output files were left out.
func noteFiles(res *Result) {
	if len(res.FileNotes) > 0 {
		res.Stderr = appendNote(res.Stderr, "pybox: "+strings.Join(res.FileNotes, "; ")+".")
	}
}

// appendNote adds a pybox line to a stream, on a line of its own.
func appendNote(stream, note string) string {
	if stream != "" && !strings.HasSuffix(stream, "\n") {
		stream += "\n"
	}
	return stream + note + "\n"
}

// engineFailure turns an engine error into a result that says what to do.
func (s *Sandbox) engineFailure(ctx context.Context, err error) Result {
	host := s.eng.Host()
	switch {
	case ctx.Err() != nil:
		return failure(ErrCancelled, ctx.Err(), "pybox: the call was cancelled.")
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

func (s *Sandbox) containerSpec(callID string) containerSpec {
	o := s.opt
	uid, gid, _ := strings.Cut(o.User, ":")
	if gid == "" {
		gid = uid
	}
	env := append(containerEnv(), "PYBOX_UID="+uid, "PYBOX_GID="+gid, fmt.Sprintf("PYBOX_OUTPUT_MAX=%d", o.MaxOutputBytes))
	return containerSpec{
		Image: o.Image,
		Cmd:   []string{"python3", "-I", "-B", "-u", "-c", runnerSource},
		Env:   env,
		// The supervisor starts as root with the capabilities it needs to
		// drop to User; the code never has any (see runner.py).
		User:       "0:0",
		CapAdd:     supervisorCaps,
		WorkingDir: workDir,
		Labels: map[string]string{
			LabelManaged: "true",
			LabelOwner:   s.owner,
			LabelCall:    callID,
		},
		Hostname:    "sandbox",
		Runtime:     o.Runtime,
		Network:     o.Network,
		MemoryBytes: o.MemoryBytes,
		NanoCPUs:    o.NanoCPUs,
		PidsLimit:   o.PidsLimit,
		ReadOnly:    !o.WritableRoot,
		Tmpfs: map[string]string{
			"/tmp":           fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", o.TmpfsBytes),
			"/mnt/user-data": fmt.Sprintf("rw,nosuid,nodev,noexec,size=%d,mode=0755", o.MaxInputBytes+(1<<20)),
			"/mnt/outputs":   fmt.Sprintf("rw,nosuid,nodev,noexec,size=%d,uid=%s,gid=%s,mode=0755", o.OutputsTmpfsBytes, uid, gid),
		},
		ShmBytes:   DefaultShmBytes,
		CapDropAll: !o.KeepCapabilities,
		NoNewPrivs: !o.AllowNewPrivileges,
		Seccomp:    o.seccomp,
		LogDriver:  o.LogDriver,
		Init:       true,
		NoFile:     DefaultNoFile,
	}
}

func (s *Sandbox) track(id string) {
	s.mu.Lock()
	s.active[id] = struct{}{}
	s.mu.Unlock()
}

// remove destroys a container even when the caller has gone away.
func (s *Sandbox) remove(ctx context.Context, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := s.eng.Remove(rctx, id); err != nil {
		s.log.Warn().Str("container", shortID(id)).Err(err).Msg("removing container failed; a later start-up removes it")
		return
	}
	s.mu.Lock()
	delete(s.active, id)
	s.mu.Unlock()
}

// removeByCall removes whatever container carries a call's label.
func (s *Sandbox) removeByCall(ctx context.Context, callID string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	cs, err := s.eng.List(rctx, map[string]string{LabelManaged: "true", LabelCall: callID})
	if err != nil {
		return
	}
	for _, c := range cs {
		s.remove(rctx, c.ID)
	}
}

// Close stops new calls, kills the running ones and removes every container
// this server made. It waits for that until ctx ends.
func (s *Sandbox) Close(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.closePool()
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	select {
	case <-done:
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
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		if err := s.eng.Remove(rctx, id); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	// Anything of ours that the engine made after we stopped tracking.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if cs, err := s.eng.List(lctx, map[string]string{LabelManaged: "true", LabelOwner: s.owner}); err == nil {
		for _, c := range cs {
			if err := s.eng.Remove(lctx, c.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c, ok := s.eng.(interface{ Close() error }); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
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
func clip(msg string, n int) string {
	if len(msg) <= n {
		return msg
	}
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n] + " [...]"
}
