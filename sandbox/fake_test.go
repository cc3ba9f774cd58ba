package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fakeEngine is an engine whose containers run fakeRunner, a runner in Go
// that speaks the real protocol and takes the call's code as a script (see
// fakeRunner.call). It lets the pool, the sessions and the one execution
// path be tested without Docker, success and failure alike.
type fakeEngine struct {
	mu         sync.Mutex
	containers map[string]*fakeContainer
	next       int
	created    int

	// Knobs, set before use.
	createDelay time.Duration // Create takes this long, whatever its context
	createErr   error
	neverReady  bool // runners never say they are ready
	readyDelay  time.Duration
	removeFails int // Remove fails this many more times
}

type fakeContainer struct {
	id        string
	spec      containerSpec
	running   bool
	exitCode  int
	oom       bool
	kills     []int // signals sent from "outside"
	removed   bool
	stdinR    *io.PipeReader
	stdinW    *io.PipeWriter
	stdoutR   *io.PipeReader
	stdoutW   *io.PipeWriter
	stopped   chan struct{}
	stopOnce  sync.Once
	sessionKV map[string]string
	calls     int  // calls it ran
	paused    bool // frozen from outside
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{containers: map[string]*fakeContainer{}}
}

// newFake returns a Sandbox on a fake engine, closed when the test ends.
func newFake(t *testing.T, opt Options) (*Sandbox, *fakeEngine) {
	t.Helper()
	f := newFakeEngine()
	s, err := newSandbox(opt, engineParts{ctr: f, lst: f}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := f.live(); n != 0 {
			t.Errorf("%d fake containers left after Close", n)
		}
	})
	return s, f
}

func (f *fakeEngine) Host() string { return "fake://engine" }

func (f *fakeEngine) Create(ctx context.Context, spec containerSpec) (string, error) {
	if f.createDelay > 0 {
		time.Sleep(f.createDelay)
	}
	f.mu.Lock()
	if err := f.createErr; err != nil {
		f.mu.Unlock()
		return "", err
	}
	f.next++
	f.created++
	c := &fakeContainer{id: fmt.Sprintf("fake%04d", f.next), spec: spec, stopped: make(chan struct{}), sessionKV: map[string]string{}}
	f.containers[c.id] = c
	f.mu.Unlock()
	// A slow engine makes the container even when the caller stopped waiting.
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return c.id, nil
}

func (f *fakeEngine) get(id string) (*fakeContainer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[id]
	if c == nil || c.removed {
		return nil, fmt.Errorf("%w: %s", errGone, id)
	}
	return c, nil
}

func (f *fakeEngine) Launch(ctx context.Context, id string) (stream, error) {
	c, err := f.get(id)
	if err != nil {
		return nil, err
	}
	c.stdinR, c.stdinW = io.Pipe()
	c.stdoutR, c.stdoutW = io.Pipe()
	f.mu.Lock()
	c.running = true
	f.mu.Unlock()
	r := &fakeRunner{f: f, c: c, in: bufio.NewReader(c.stdinR), frames: make(chan fakeFrame, 16)}
	go r.run()
	return &fakeStream{c: c}, nil
}

// exit ends a container's runner with an exit code.
func (f *fakeEngine) exit(c *fakeContainer, code int, oom bool, killSig int) {
	f.mu.Lock()
	if c.running {
		c.running, c.exitCode, c.oom = false, code, oom
		if killSig > 0 {
			c.kills = append(c.kills, killSig)
		}
	}
	f.mu.Unlock()
	c.stopOnce.Do(func() {
		close(c.stopped)
		c.stdoutW.Close()
		c.stdinR.Close()
	})
	// As Docker's AutoRemove does.
	f.mu.Lock()
	c.removed = true
	f.mu.Unlock()
}

func (f *fakeEngine) Kill(ctx context.Context, id string) error {
	c, err := f.get(id)
	if err != nil {
		return nil
	}
	if c.stdoutW != nil {
		f.exit(c, 137, false, 9)
	}
	return nil
}

func (f *fakeEngine) Wait(ctx context.Context, id string) (int, error) {
	c, err := f.get(id)
	if err != nil {
		return -1, err
	}
	select {
	case <-c.stopped:
		return c.exitCode, nil
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

func (f *fakeEngine) Inspect(ctx context.Context, id string) (containerState, error) {
	c, err := f.get(id)
	if err != nil {
		return containerState{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return containerState{Running: c.running, ExitCode: c.exitCode, OOMKilled: c.oom, Paused: c.paused}, nil
}

func (f *fakeEngine) History(ctx context.Context, id string, since time.Time) (containerHistory, error) {
	f.mu.Lock()
	c := f.containers[id]
	f.mu.Unlock()
	if c == nil {
		return containerHistory{}, ctx.Err()
	}
	select {
	case <-c.stopped:
	case <-ctx.Done():
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return containerHistory{Kills: append([]int(nil), c.kills...), OOM: c.oom, Died: !c.running, ExitCode: c.exitCode, Removed: c.removed}, nil
}

func (f *fakeEngine) Remove(ctx context.Context, id string) error {
	f.mu.Lock()
	if f.removeFails > 0 {
		f.removeFails--
		f.mu.Unlock()
		return errors.New("the engine is restarting")
	}
	f.mu.Unlock()
	c, err := f.get(id)
	if err != nil {
		return nil
	}
	if c.stdoutW != nil {
		f.exit(c, 137, false, 0)
	}
	f.mu.Lock()
	c.removed = true
	f.mu.Unlock()
	return nil
}

func (f *fakeEngine) List(ctx context.Context, labels map[string]string) ([]listedContainer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []listedContainer
next:
	for _, c := range f.containers {
		if c.removed {
			continue
		}
		for k, v := range labels {
			if c.spec.Labels[k] != v {
				continue next
			}
		}
		state := "created"
		if c.running {
			state = "running"
		}
		out = append(out, listedContainer{ID: c.id, Labels: c.spec.Labels, State: state})
	}
	return out, nil
}

// maxCalls is the most calls one container ran.
func (f *fakeEngine) maxCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.containers {
		n = max(n, c.calls)
	}
	return n
}

// live counts the containers not removed.
func (f *fakeEngine) live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.containers {
		if !c.removed {
			n++
		}
	}
	return n
}

// removeFromOutside removes a container as `docker rm -f` would.
func (f *fakeEngine) removeFromOutside(id string) {
	c, _ := f.get(id)
	if c == nil {
		return
	}
	f.exit(c, 137, false, 9)
	f.mu.Lock()
	c.removed = true
	f.mu.Unlock()
}

type fakeStream struct{ c *fakeContainer }

func (s *fakeStream) Stdin() io.Writer { return s.c.stdinW }
func (s *fakeStream) Demux(stdout, stderr io.Writer) error {
	_, err := io.Copy(stdout, s.c.stdoutR)
	return err
}
func (s *fakeStream) Close() error {
	s.c.stdinW.Close()
	s.c.stdoutR.Close()
	return nil
}

type fakeFrame struct {
	typ     byte
	payload []byte
}

// fakeRunner plays runner.py's part in a fake container.
type fakeRunner struct {
	f      *fakeEngine
	c      *fakeContainer
	in     *bufio.Reader
	frames chan fakeFrame
	mode   string
	wmu    sync.Mutex
}

func (r *fakeRunner) emit(typ byte, payload []byte) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.c.stdoutW.Write(appendFrame(nil, typ, payload))
}

func (r *fakeRunner) run() {
	go func() {
		defer close(r.frames)
		for {
			var h [frameHeader]byte
			if _, err := io.ReadFull(r.in, h[:]); err != nil {
				return
			}
			p := make([]byte, binary.BigEndian.Uint32(h[1:]))
			if _, err := io.ReadFull(r.in, p); err != nil {
				return
			}
			r.frames <- fakeFrame{h[0], p}
		}
	}()
	cfg, ok := <-r.frames
	if !ok || cfg.typ != frameConfig {
		r.f.exit(r.c, 1, false, 0)
		return
	}
	var rc runnerConfig
	json.Unmarshal(cfg.payload, &rc)
	r.mode = rc.Mode
	if r.f.neverReady {
		<-r.c.stopped
		return
	}
	r.f.mu.Lock()
	delay := r.f.readyDelay
	r.f.mu.Unlock()
	time.Sleep(delay)
	r.emit(frameReady, nil)
	for fr := range r.frames {
		if fr.typ != frameRun {
			continue
		}
		head, rest, _ := bytes.Cut(fr.payload, []byte("\n"))
		var req struct{ Seq, Code int }
		json.Unmarshal(head, &req)
		r.f.mu.Lock()
		r.c.calls++
		r.f.mu.Unlock()
		if !r.call(req.Seq, string(rest[:req.Code])) {
			return
		}
		if r.mode != modeSession {
			r.f.exit(r.c, 0, false, 0)
			return
		}
	}
	r.f.exit(r.c, 0, false, 0)
}

// call runs a script, one command a line, and reports its end; false means
// the container is gone. Commands:
//
//	print TEXT, eprint TEXT   a line on stdout or stderr
//	file NAME TEXT            an output file
//	set KEY VALUE, get KEY    session state
//	sleep DURATION            interrupted by I (exit 130) and K
//	hang                      stopped by K only
//	exit N                    the call's exit status
//	die N                     the runner dies: the container exits N
//	oom                       the container is killed for memory
//	kill                      the container is killed from outside
//	deaf                      answers nothing until killed
//	freeze                    as deaf, and the engine says it is paused
//	garbage                   a frame of no known type
func (r *fakeRunner) call(seq int, code string) bool {
	done := func(rep map[string]any) {
		rep["seq"] = seq
		if _, ok := rep["exit"]; !ok {
			if _, ok := rep["signal"]; !ok {
				rep["exit"] = 0
			}
		}
		b, _ := json.Marshal(rep)
		r.emit(frameDone, b)
	}
	wait := func(d time.Duration, interruptible bool) (stopped, interrupted bool, gone bool) {
		t := time.NewTimer(d)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				return false, false, false
			case fr, ok := <-r.frames:
				if !ok {
					return false, false, true
				}
				switch {
				case fr.typ == frameStop:
					return true, false, false
				case fr.typ == frameInterrupt && interruptible:
					return false, true, false
				}
			}
		}
	}
	for _, line := range strings.Split(code, "\n") {
		cmd, arg, _ := strings.Cut(line, " ")
		switch cmd {
		case "print":
			r.emit(frameStdout, []byte(arg+"\n"))
		case "eprint":
			r.emit(frameStderr, []byte(arg+"\n"))
		case "file":
			name, text, _ := strings.Cut(arg, " ")
			p := binary.BigEndian.AppendUint16(nil, uint16(len(name)))
			r.emit(frameFile, append(append(p, name...), text...))
		case "set":
			k, v, _ := strings.Cut(arg, " ")
			r.c.sessionKV[k] = v
		case "get":
			r.emit(frameStdout, []byte(r.c.sessionKV[arg]+"\n"))
		case "sleep", "hang":
			d, _ := time.ParseDuration(arg)
			if cmd == "hang" {
				d = time.Hour
			}
			stopped, interrupted, gone := wait(d, cmd == "sleep")
			switch {
			case gone:
				return false
			case stopped:
				if r.mode == modeSession {
					r.c.sessionKV = map[string]string{}
					done(map[string]any{"signal": 9, "stopped": true, "restarted": "stopped"})
					return true
				}
				done(map[string]any{"signal": 9, "stopped": true})
				return false
			case interrupted:
				r.emit(frameStderr, []byte("KeyboardInterrupt\n"))
				done(map[string]any{"exit": 130})
				return true
			}
		case "exit":
			n, _ := strconv.Atoi(arg)
			done(map[string]any{"exit": n})
			return true
		case "die":
			n, _ := strconv.Atoi(arg)
			r.f.exit(r.c, n, false, 0)
			return false
		case "oom":
			r.f.exit(r.c, 137, true, 0)
			return false
		case "kill":
			r.f.exit(r.c, 137, false, 9)
			return false
		case "deaf":
			<-r.c.stopped
			return false
		case "freeze":
			r.f.mu.Lock()
			r.c.paused = true
			r.f.mu.Unlock()
			<-r.c.stopped
			return false
		case "garbage":
			r.emit('?', []byte("not a frame pybox knows"))
			<-r.c.stopped
			return false
		}
	}
	done(map[string]any{})
	return true
}

// failingEngine fails every call with err: the error paths a real engine
// cannot be made to take on demand.
type failingEngine struct{ err error }

func (f failingEngine) Create(context.Context, containerSpec) (string, error) { return "", f.err }
func (f failingEngine) Launch(context.Context, string) (stream, error)        { return nil, f.err }
func (f failingEngine) Kill(context.Context, string) error                    { return f.err }
func (f failingEngine) Wait(context.Context, string) (int, error)             { return 0, f.err }
func (f failingEngine) Inspect(context.Context, string) (containerState, error) {
	return containerState{}, f.err
}
func (f failingEngine) History(context.Context, string, time.Time) (containerHistory, error) {
	return containerHistory{}, f.err
}
func (f failingEngine) Remove(context.Context, string) error { return f.err }
func (f failingEngine) List(context.Context, map[string]string) ([]listedContainer, error) {
	return nil, f.err
}
func (f failingEngine) Host() string { return "unix:///fake.sock" }

func failingParts(err error) engineParts {
	f := failingEngine{err}
	return engineParts{ctr: f, lst: f}
}

func TestEngineFailures(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"connection refused", &net.OpError{Op: "dial", Net: "unix", Err: syscall.ECONNREFUSED}, "did not answer"},
		{"image missing", errImageMissing, "pybox image build"},
		{"engine refuses", errors.New("invalid runtime name: runsc"), "refused to run the sandbox: invalid runtime name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := newSandbox(Options{}, failingParts(tt.err), zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			res := s.Run(context.Background(), Request{Code: "print(1)"})
			if res.Error != ErrSandboxUnavailable || res.ExitCode != ExitNotRun {
				t.Errorf("Run() = error %q exit %d; want sandbox_unavailable, 1", res.Error, res.ExitCode)
			}
			if !strings.Contains(res.Stderr, tt.want) || !strings.Contains(res.Stderr, "unix:///fake.sock") {
				t.Errorf("Run().Stderr = %q; want it to contain %q and the engine's address", res.Stderr, tt.want)
			}
		})
	}
}

func nopLogger() zerolog.Logger { return zerolog.Nop() }
