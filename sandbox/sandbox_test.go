package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/pybox/pybox/internal/testenv"
)

// newTest returns a Sandbox on the real engine, closed when the test ends,
// and checks that the test left none of its containers behind.
func newTest(t *testing.T, opt Options) *Sandbox {
	t.Helper()
	opt.Image = testenv.Image(DefaultImage)
	testenv.Engine(t, opt.Image)
	switch opt.PoolSize {
	case 0:
		opt.PoolSize = testPool()
	case -1:
		opt.PoolSize = 0 // this test wants no pool
	}
	s, err := New(opt, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if left := owned(t, s); len(left) > 0 {
			t.Errorf("containers left after Close: %v", left)
		}
	})
	return s
}

// owned lists the engine's containers that carry s's owner label, other
// than the pool's waiting ones. Removal runs after a call returns, so it
// waits up to 10 s for the list to empty.
func owned(t *testing.T, s *Sandbox) []string {
	t.Helper()
	var ids []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		ids = ids[:0]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cs, err := s.lst.List(ctx, map[string]string{LabelManaged: "true", LabelOwner: s.owner})
		cancel()
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		waiting := map[string]bool{}
		if s.pool != nil {
			s.pool.mu.Lock()
			for _, w := range s.pool.ready {
				waiting[w.id] = true
			}
			s.pool.mu.Unlock()
		}
		for _, c := range cs {
			if !waiting[c.ID] && !strings.HasPrefix(c.Labels[LabelCall], "pool-") || (!waiting[c.ID] && c.State != "running") {
				ids = append(ids, shortID(c.ID)+"("+c.State+")")
			}
		}
		if len(ids) == 0 || time.Now().After(deadline) {
			return ids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testPool is the pool size the engine tests run with: PYBOX_TEST_POOL,
// so that CI runs the walls and the attacks with the pool on too.
func testPool() int {
	n, _ := strconv.Atoi(os.Getenv("PYBOX_TEST_POOL"))
	return n
}

func TestRun(t *testing.T) {
	s := newTest(t, Options{})
	tests := []struct {
		name       string
		code       string
		wantExit   int
		wantStdout string
		// stderr must contain each of these
		wantStderr []string
		// and none of these
		notStderr []string
	}{
		{name: "print", code: "print(round(47/1283*100, 3))", wantStdout: "3.663\n"},
		{
			name:     "NameError on line 3",
			code:     "import math\nx = math.pi\nprint(undefined_name)\n",
			wantExit: 1,
			wantStderr: []string{
				"Traceback (most recent call last):\n  File \"main.py\", line 3, in <module>\n    print(undefined_name)\n",
				"NameError: name 'undefined_name' is not defined",
			},
			notStderr: []string{"runner", "_pybox", "<string>"},
		},
		{name: "sys.exit(3)", code: "import sys\nsys.exit(3)", wantExit: 3},
		{name: "sys.exit with a message", code: "import sys\nsys.exit('bad input')", wantExit: 1, wantStderr: []string{"bad input"}},
		{name: "exit(0) after output", code: "print('a')\nraise SystemExit(0)", wantStdout: "a\n"},
		{
			name:       "syntax error",
			code:       "x = 1\ny = = 2\n",
			wantExit:   1,
			wantStderr: []string{"File \"main.py\", line 2", "SyntaxError"},
			notStderr:  []string{"Traceback", "_pybox"},
		},
		{
			name:       "traceback through a function",
			code:       "def f(n):\n    return 1 / n\n\nf(0)\n",
			wantExit:   1,
			wantStderr: []string{"line 4, in <module>", "line 2, in f", "ZeroDivisionError"},
			notStderr:  []string{"_pybox"},
		},
		{name: "stdin is empty", code: "import sys\nprint(repr(sys.stdin.read()))", wantStdout: "''\n"},
		{name: "main module is clean", code: "print(sorted(k for k in globals() if not k.startswith('__')), __name__)", wantStdout: "[] __main__\n"},
		{name: "argv", code: "import sys\nprint(sys.argv)", wantStdout: "['main.py']\n"},
		{name: "unicode", code: "print('héllo ✓ 𝄞')", wantStdout: "héllo ✓ 𝄞\n"},
		{name: "stderr", code: "import sys\nprint('warn', file=sys.stderr)", wantStderr: []string{"warn\n"}},
		{name: "empty code", code: ""},
		{name: "pickle a class of main", code: "import pickle\nclass A: pass\nprint(type(pickle.loads(pickle.dumps(A()))).__name__)", wantStdout: "A\n"},
		{name: "numpy and pandas", code: "import numpy as np, pandas as pd\nprint(pd.DataFrame({'a': np.arange(4)}).a.sum())", wantStdout: "6\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := s.Run(context.Background(), Request{Code: tt.code, Timeout: 30 * time.Second})
			if res.Error != ErrNone {
				t.Fatalf("Run(%q).Error = %q (%v); want none; stderr %q", tt.code, res.Error, res.Cause, res.Stderr)
			}
			if res.ExitCode != tt.wantExit {
				t.Errorf("Run(%q).ExitCode = %d; want %d (stderr %q)", tt.code, res.ExitCode, tt.wantExit, res.Stderr)
			}
			if tt.wantStdout != "" || tt.wantExit == 0 && len(tt.wantStderr) == 0 {
				if res.Stdout != tt.wantStdout {
					t.Errorf("Run(%q).Stdout = %q; want %q", tt.code, res.Stdout, tt.wantStdout)
				}
			}
			for _, w := range tt.wantStderr {
				if !strings.Contains(res.Stderr, w) {
					t.Errorf("Run(%q).Stderr = %q; want it to contain %q", tt.code, res.Stderr, w)
				}
			}
			for _, w := range tt.notStderr {
				if strings.Contains(res.Stderr, w) {
					t.Errorf("Run(%q).Stderr = %q; want no %q", tt.code, res.Stderr, w)
				}
			}
			if res.Duration <= 0 {
				t.Errorf("Run(%q).Duration = %v; want > 0", tt.code, res.Duration)
			}
		})
	}
}

func TestTracebackHasOneFrame(t *testing.T) {
	s := newTest(t, Options{})
	res := s.Run(context.Background(), Request{Code: "a = 1\nb = 2\nprint(c)\n"})
	if res.ExitCode != 1 {
		t.Fatalf("ExitCode = %d; want 1", res.ExitCode)
	}
	if n := strings.Count(res.Stderr, "  File "); n != 1 {
		t.Errorf("traceback has %d frames; want 1:\n%s", n, res.Stderr)
	}
	if !strings.Contains(res.Stderr, `File "main.py", line 3, in <module>`) {
		t.Errorf("traceback does not name line 3:\n%s", res.Stderr)
	}
}

func TestTimeoutKeepsOutput(t *testing.T) {
	s := newTest(t, Options{})
	start := time.Now()
	res := s.Run(context.Background(), Request{
		Code:    "import sys\nprint('before', flush=True)\nprint('err-before', file=sys.stderr, flush=True)\nwhile True: pass\n",
		Timeout: 2 * time.Second,
	})
	elapsed := time.Since(start)
	if elapsed > 3500*time.Millisecond {
		t.Errorf("a 2 s timeout returned after %v; want within 3.5 s", elapsed)
	}
	if res.ExitCode != ExitTimeout || res.Error != ErrTimeout {
		t.Errorf("ExitCode, Error = %d, %q; want 124, timeout", res.ExitCode, res.Error)
	}
	if res.Stdout != "before\n" {
		t.Errorf("Stdout = %q; want what was printed before the timeout", res.Stdout)
	}
	if !strings.HasPrefix(res.Stderr, "err-before\n") || !strings.Contains(res.Stderr, "timeout") {
		t.Errorf("Stderr = %q; want the code's stderr, then a timeout note", res.Stderr)
	}
	// The timeout bounds the whole call; the code ran for what was left
	// once it had its sandbox (which, pooled, may still have been starting).
	left := 2*time.Second - res.Timing.Queue - res.Timing.Acquire
	if res.Duration > 2*time.Second || res.Duration < left-500*time.Millisecond {
		t.Errorf("Duration = %v; want a little under what the 2 s timeout left once the sandbox was had (%v; queue %v, acquire %v)", res.Duration, left, res.Timing.Queue, res.Timing.Acquire)
	}
}

func TestMemoryLimit(t *testing.T) {
	s := newTest(t, Options{})
	res := s.Run(context.Background(), Request{Code: "print('start', flush=True)\ns = 'a' * 600_000_000\nprint(len(s))\n"})
	if res.ExitCode != ExitKilled || res.Error != ErrMemoryLimit {
		t.Errorf("ExitCode, Error = %d, %q; want 137, memory_limit (stderr %q)", res.ExitCode, res.Error, res.Stderr)
	}
	if res.Stdout != "start\n" {
		t.Errorf("Stdout = %q; want %q", res.Stdout, "start\n")
	}
}

// TestMemoryKillOfAChild: a child process killed for memory is the code's
// business when the code goes on; the call is not a memory kill.
func TestMemoryKillOfAChild(t *testing.T) {
	s := newTest(t, Options{})
	res := s.Run(context.Background(), Request{Code: `import subprocess, sys
r = subprocess.run([sys.executable, "-c", "s = 'a' * 600_000_000"])
print("child", r.returncode)
`})
	if res.ExitCode != 0 || res.Error != ErrNone || res.Stdout != "child -9\n" {
		t.Errorf("got exit %d, error %q, stdout %q; want 0, none, \"child -9\"", res.ExitCode, res.Error, res.Stdout)
	}
	// The code's own SIGKILL is no memory kill either.
	res = s.Run(context.Background(), Request{Code: "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"})
	if res.ExitCode != ExitKilled || res.Error != ErrNone {
		t.Errorf("self-kill: exit %d, error %q; want 137, none", res.ExitCode, res.Error)
	}
}

func TestEndlessOutput(t *testing.T) {
	s := newTest(t, Options{OutputLimit: 8 << 10})
	code := "import sys\nprint('FIRST-LINE')\ni = 0\nwhile True:\n    i += 1\n    print(f'line {i} ' + 'x' * 200)\n    if i % 1000 == 0:\n        print(f'LAST {i}', file=sys.stderr)\n"
	start := time.Now()
	res := s.Run(context.Background(), Request{Code: code, Timeout: 3 * time.Second})
	if time.Since(start) > 5*time.Second {
		t.Errorf("endless output returned after %v; want by its 3 s timeout", time.Since(start))
	}
	if res.Error != ErrTimeout || !res.Truncated {
		t.Fatalf("Error, Truncated = %q, %v; want timeout, true", res.Error, res.Truncated)
	}
	if !strings.HasPrefix(res.Stdout, "FIRST-LINE\nline 1 ") {
		t.Errorf("Stdout does not keep the head: %.80q", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "bytes omitted") {
		t.Errorf("Stdout has no truncation marker")
	}
	if len(res.Stdout) > 9<<10 {
		t.Errorf("len(Stdout) = %d; want about the 8 KiB limit", len(res.Stdout))
	}
	if res.StdoutBytes < 1<<20 {
		t.Errorf("StdoutBytes = %d; the flood should pass 1 MiB in 3 s", res.StdoutBytes)
	}
	// The tail is the most recent output: its last full line is a late one.
	lines := strings.Split(strings.TrimRight(res.Stdout, "\n"), "\n")
	last := lines[len(lines)-1]
	var n int
	if _, err := fmt.Sscanf(last, "line %d", &n); err != nil || int64(n) < res.StdoutBytes/220 {
		t.Errorf("last kept line %.40q is not from the end of the stream", last)
	}
	if !utf8.ValidString(res.Stdout) || !utf8.ValidString(res.Stderr) {
		t.Errorf("output is not valid UTF-8")
	}
}

func TestBinaryOutputIsValidUTF8(t *testing.T) {
	s := newTest(t, Options{})
	res := s.Run(context.Background(), Request{Code: "import sys\nsys.stdout.buffer.write(bytes(range(256)))\nsys.stderr.buffer.write(b'\\xff\\xfe bad \\xc3')\n"})
	if res.ExitCode != 0 {
		t.Fatalf("ExitCode = %d; stderr %q", res.ExitCode, res.Stderr)
	}
	if !utf8.ValidString(res.Stdout) || !utf8.ValidString(res.Stderr) {
		t.Fatalf("output is not valid UTF-8")
	}
	b, err := json.Marshal(res.Stdout)
	if err != nil || !json.Valid(b) {
		t.Fatalf("stdout does not encode as valid JSON: %v", err)
	}
	if !strings.HasPrefix(res.Stdout, "\x00\x01\x02") || !strings.Contains(res.Stdout, "xyz{|}~\x7f") {
		t.Errorf("the ASCII bytes were not kept: %q", res.Stdout)
	}
}

// TestWalls checks the sandbox from inside, by what the code sees, and
// from outside, by the engine's inspection of the running container.
func TestWalls(t *testing.T) {
	const canaryName, canary = "PYBOX_TEST_CANARY_TOKEN", "canary-7d1f0c2a9be34e51"
	t.Setenv(canaryName, canary)
	s := newTest(t, Options{})
	probe := `
import os, json, time
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
def writable(p):
    try:
        with open(p, "w") as f: f.write("x")
        return True
    except OSError:
        return False
mounts = [l.split()[1:4] for l in open("/proc/self/mounts")]
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    "ifaces": sorted(os.listdir("/sys/class/net")),
    "capeff": status["CapEff"].strip(), "capbnd": status["CapBnd"].strip(),
    "nonewprivs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
    "root_writable": writable("/probe"), "etc_writable": writable("/etc/probe"),
    "tmp_writable": writable("/tmp/probe"),
    "mounts": mounts,
    "environ": dict(os.environ),
}), flush=True)
time.sleep(4)
`
	type probeOut struct {
		UID, GID     int
		Ifaces       []string
		CapEff       string
		CapBnd       string
		NoNewPrivs   string
		Seccomp      string
		RootWritable bool `json:"root_writable"`
		EtcWritable  bool `json:"etc_writable"`
		TmpWritable  bool `json:"tmp_writable"`
		Mounts       [][]string
		Environ      map[string]string
	}
	// The call says which container runs it (a pooled one carries the
	// label of the call it was started for, not this one's).
	container := make(chan string, 1)
	progress := func(p Progress) {
		if p.Container != "" {
			select {
			case container <- p.Container:
			default:
			}
		}
	}
	done := make(chan Result, 1)
	go func() { done <- s.Run(context.Background(), Request{Code: probe, Progress: progress}) }()

	// Inspect the container while it runs.
	var raw json.RawMessage
	select {
	case id := <-container:
		st, err := s.ctr.Inspect(context.Background(), id)
		if err == nil && st.Running {
			raw = st.Raw
		}
	case <-time.After(20 * time.Second):
	}
	res := <-done
	if res.ExitCode != 0 {
		t.Fatalf("probe failed: exit %d, %s", res.ExitCode, res.Stderr)
	}
	var p probeOut
	if err := json.Unmarshal([]byte(res.Stdout), &p); err != nil {
		t.Fatalf("probe output %q: %v", res.Stdout, err)
	}
	checks := []struct {
		name string
		ok   bool
		got  any
	}{
		{"only lo", len(p.Ifaces) == 1 && p.Ifaces[0] == "lo", p.Ifaces},
		{"non-zero uid", p.UID != 0 && p.GID != 0, [2]int{p.UID, p.GID}},
		{"CapEff 0", p.CapEff == "0000000000000000", p.CapEff},
		{"CapBnd 0", p.CapBnd == "0000000000000000", p.CapBnd},
		{"NoNewPrivs 1", p.NoNewPrivs == "1", p.NoNewPrivs},
		{"seccomp filtering", p.Seccomp == "2", p.Seccomp},
		{"read-only root", !p.RootWritable && !p.EtcWritable, [2]bool{p.RootWritable, p.EtcWritable}},
		{"writable /tmp", p.TmpWritable, p.TmpWritable},
		{"no canary", !strings.Contains(res.Stdout, canary), "environ has the canary"},
		{"no host variable", p.Environ["HOME"] == "/tmp" && p.Environ[canaryName] == "" && p.Environ["GOPATH"] == "" && p.Environ["PYBOX_REQUIRE_ENGINE"] == "", p.Environ},
	}
	for _, m := range p.Mounts {
		if m[0] == "/tmp" {
			checks = append(checks, struct {
				name string
				ok   bool
				got  any
			}{"tmp is a tmpfs of 64 MiB", m[1] == "tmpfs" && strings.Contains(m[2], "size=65536k"), m})
		}
		// The engine's own files (resolv.conf, hosts, hostname) are the only
		// bind mounts Docker adds; nothing of the host's tree.
		if (strings.HasPrefix(m[0], "/mnt") && m[1] != "tmpfs") || strings.HasPrefix(m[0], "/home") || strings.HasPrefix(m[0], "/root") || strings.HasPrefix(m[0], "/var/run") {
			checks = append(checks, struct {
				name string
				ok   bool
				got  any
			}{"no host mount", false, m})
		}
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("inside: %s: got %v", c.name, c.got)
		}
	}

	if raw == nil {
		t.Fatal("could not inspect the running container")
	}
	var in struct {
		Config struct {
			Env    []string
			User   string
			Labels map[string]string
		}
		HostConfig struct {
			NetworkMode    string
			ReadonlyRootfs bool
			CapDrop        []string
			CapAdd         []string
			SecurityOpt    []string
			Privileged     bool
			Memory         int64
			MemorySwap     int64
			NanoCpus       int64
			PidsLimit      *int64
			Tmpfs          map[string]string
			Binds          []string
			LogConfig      struct{ Type string }
			IpcMode        string
			PidMode        string
			UsernsMode     string
		}
		Mounts []any
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	h := in.HostConfig
	seccompPinned := false
	nnp := false
	for _, o := range h.SecurityOpt {
		seccompPinned = seccompPinned || strings.HasPrefix(o, "seccomp=") && strings.Contains(o, "SCMP_ACT_ERRNO")
		nnp = nnp || o == "no-new-privileges:true" || o == "no-new-privileges"
	}
	env := strings.Join(in.Config.Env, "\n")
	outside := []struct {
		name string
		ok   bool
		got  any
	}{
		{"network none", h.NetworkMode == "none", h.NetworkMode},
		{"read-only root", h.ReadonlyRootfs, h.ReadonlyRootfs},
		{"cap drop ALL, none added", len(h.CapDrop) == 1 && h.CapDrop[0] == "ALL" && len(h.CapAdd) == 0, [2][]string{h.CapDrop, h.CapAdd}},
		{"not privileged", !h.Privileged, h.Privileged},
		{"no-new-privileges", nnp, h.SecurityOpt},
		{"pinned seccomp profile", seccompPinned, len(h.SecurityOpt)},
		{"memory 256 MiB", h.Memory == 256<<20, h.Memory},
		{"no swap", h.MemorySwap == h.Memory, h.MemorySwap},
		{"1 CPU", h.NanoCpus == 1e9, h.NanoCpus},
		{"pids 64", h.PidsLimit != nil && *h.PidsLimit == 64, h.PidsLimit},
		{"tmpfs /tmp 64 MiB", strings.Contains(h.Tmpfs["/tmp"], "size=67108864"), h.Tmpfs},
		{"no binds", len(h.Binds) == 0, h.Binds},
		{"no mounts", len(in.Mounts) == 0, in.Mounts},
		{"log driver none", h.LogConfig.Type == "none", h.LogConfig.Type},
		{"private ipc", h.IpcMode == "private", h.IpcMode},
		{"own pid namespace", h.PidMode == "", h.PidMode},
		{"a non-root user", nonRootUser(in.Config.User), in.Config.User},
		{"label", in.Config.Labels[LabelManaged] == "true" && in.Config.Labels[LabelOwner] == s.owner, in.Config.Labels},
		{"no host variable", !strings.Contains(env, canary) && !strings.Contains(env, "GOPATH") && !strings.Contains(env, "PYBOX_REQUIRE") && !strings.Contains(env, "PYBOX_TEST"), in.Config.Env},
	}
	for _, c := range outside {
		if !c.ok {
			t.Errorf("engine inspection: %s: got %v", c.name, c.got)
		}
	}
}

func TestConcurrentCallsGetTheirOwnOutput(t *testing.T) {
	const calls, limit = 32, 3
	s := newTest(t, Options{MaxConcurrent: limit})

	// Watch the engine: count this server's running containers meanwhile.
	stopWatch := make(chan struct{})
	var watchMax int
	var watchWG sync.WaitGroup
	watchWG.Add(1)
	go func() {
		defer watchWG.Done()
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
			cs, err := s.lst.List(context.Background(), map[string]string{LabelOwner: s.owner})
			if err != nil {
				continue
			}
			n := 0
			for _, c := range cs {
				if c.State == "running" {
					n++
				}
			}
			watchMax = max(watchMax, n)
		}
	}()

	var wg sync.WaitGroup
	results := make([]Result, calls)
	nonces := make([]string, calls)
	for i := range calls {
		nonces[i] = NewID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = s.Run(context.Background(), Request{
				Code: fmt.Sprintf("import time\ntime.sleep(0.2)\nprint(%q)", nonces[i]),
			})
		}()
	}
	wg.Wait()
	close(stopWatch)
	watchWG.Wait()
	for i, r := range results {
		if r.ExitCode != 0 || r.Stdout != nonces[i]+"\n" {
			t.Errorf("call %d: exit %d, stdout %q, error %q; want its own nonce %s", i, r.ExitCode, r.Stdout, r.Error, nonces[i])
		}
	}
	_, _, peak := s.Stats()
	if peak > limit {
		t.Errorf("peak concurrent runs = %d; want at most %d", peak, limit)
	}
	// The pool grows while calls find it empty, up to its cap.
	if watchMax > limit+max(s.opt.PoolMax, 0) {
		t.Errorf("the engine showed %d running containers at once; want at most %d and the pool's cap %d", watchMax, limit, s.opt.PoolMax)
	}
	if watchMax == 0 {
		t.Errorf("the watcher never saw a running container; the check proves nothing")
	}
	t.Logf("peak %d by the limiter, %d seen running by the engine (limit %d)", peak, watchMax, limit)
}

func TestQueueFullIsTooManyRequests(t *testing.T) {
	s := newTest(t, Options{MaxConcurrent: 1, MaxQueue: -1})
	first := make(chan Result, 1)
	go func() { first <- s.Run(context.Background(), Request{Code: "import time\ntime.sleep(3)"}) }()
	// Wait until the first call holds the only slot.
	for i := 0; ; i++ {
		if running, _, _ := s.Stats(); running == 1 {
			break
		}
		if i > 200 {
			t.Fatal("the first call never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	res := s.Run(context.Background(), Request{Code: "print(1)"})
	if res.Error != ErrTooManyRequests || res.ExitCode != ExitNotRun || !strings.Contains(res.Stderr, "too many calls") {
		t.Errorf("second call: error %q, exit %d, stderr %q; want too_many_requests", res.Error, res.ExitCode, res.Stderr)
	}
	if r := <-first; r.ExitCode != 0 {
		t.Errorf("first call: exit %d, %s", r.ExitCode, r.Stderr)
	}
}

func TestNoContainerLeftBehind(t *testing.T) {
	s := newTest(t, Options{})
	t.Run("normal, error and timeout", func(t *testing.T) {
		s.Run(context.Background(), Request{Code: "print(1)"})
		s.Run(context.Background(), Request{Code: "raise ValueError"})
		s.Run(context.Background(), Request{Code: "while True: pass", Timeout: time.Second})
		if left := owned(t, s); len(left) > 0 {
			t.Errorf("containers left: %v", left)
		}
	})
	t.Run("caller cancels", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan Result, 1)
		go func() { done <- s.Run(ctx, Request{Code: "import time\nprint('up', flush=True)\ntime.sleep(60)"}) }()
		waitRunning(t, s, 1)
		cancel()
		select {
		case res := <-done:
			if res.Error != ErrCancelled {
				t.Errorf("Error = %q; want cancelled", res.Error)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a cancelled call did not return within 10 s")
		}
		if left := owned(t, s); len(left) > 0 {
			t.Errorf("containers left: %v", left)
		}
	})
}

func TestCloseRemovesRunningContainers(t *testing.T) {
	opt := Options{Image: testenv.Image(DefaultImage)}
	testenv.Engine(t, opt.Image)
	s, err := New(opt, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Result, 2)
	for range 2 {
		go func() {
			done <- s.Run(context.Background(), Request{Code: "import time\ntime.sleep(60)", Timeout: 120 * time.Second})
		}()
	}
	waitRunning(t, s, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		if r := <-done; r.Error != ErrCancelled {
			t.Errorf("a run cut by Close: error %q; want cancelled", r.Error)
		}
	}
	if left := owned(t, s); len(left) > 0 {
		t.Errorf("containers left after Close: %v", left)
	}
	t.Logf("Close took %v", time.Since(start))
	if r := s.Run(context.Background(), Request{Code: "print(1)"}); r.Error != ErrCancelled {
		t.Errorf("Run after Close: error %q; want cancelled", r.Error)
	}
}

// waitRunning waits until n of s's containers run.
func waitRunning(t *testing.T, s *Sandbox, n int) {
	t.Helper()
	for i := 0; i < 400; i++ {
		cs, _ := s.lst.List(context.Background(), map[string]string{LabelOwner: s.owner})
		running := 0
		for _, c := range cs {
			if c.State == "running" {
				running++
			}
		}
		if running >= n {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("%d containers never ran", n)
}

func TestReapRemovesOrphansOnly(t *testing.T) {
	s := newTest(t, Options{})
	host, _ := os.Hostname()
	ctx := context.Background()
	mk := func(owner string) string {
		spec := s.containerSpec(NewID(), "2000000001:2000000001")
		spec.Labels[LabelOwner] = owner
		id, err := s.ctr.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.ctr.Remove(context.Background(), id) })
		return id
	}
	dead := mk(fmt.Sprintf("%s/%d/1", host, 1<<22+12345)) // no such pid
	otherHost := mk("some-other-host/1/1")
	live := mk(fmt.Sprintf("%s/%d/%s", host, os.Getppid(), procStart(os.Getppid())))
	if _, err := s.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	exists := func(id string) bool {
		_, err := s.ctr.Inspect(ctx, id)
		return err == nil
	}
	if exists(dead) {
		t.Error("the dead server's container was not removed")
	}
	if !exists(otherHost) {
		t.Error("another host's container was removed")
	}
	if !exists(live) {
		t.Error("a live server's container was removed")
	}
}

func TestMissingImageSaysHowToBuild(t *testing.T) {
	testenv.Engine(t, testenv.Image(DefaultImage))
	s, err := New(Options{Image: "pybox-sandbox:no-such-version"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	res := s.Run(context.Background(), Request{Code: "print(1)"})
	if res.Error != ErrSandboxUnavailable || res.ExitCode != ExitNotRun {
		t.Errorf("error %q exit %d; want sandbox_unavailable, 1", res.Error, res.ExitCode)
	}
	if !strings.Contains(res.Stderr, "pybox image build") || !strings.Contains(res.Stderr, "pybox-sandbox:no-such-version") {
		t.Errorf("stderr %q does not say how to build the image", res.Stderr)
	}
}

// nonRootUser reports whether an inspection's Config.User names a uid and
// a gid other than 0.
func nonRootUser(user string) bool {
	u, g, _ := strings.Cut(user, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	return err1 == nil && err2 == nil && uid > 0 && gid > 0
}
