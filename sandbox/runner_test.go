package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Real-engine tests of the runner: what ends a call, what the walls look
// like from inside and from the engine, and what the code cannot make the
// runner say.

// forEachSetup runs f under each runtime (runc, and runsc where the engine
// has it; CI requires it), with the pool off and on.
func forEachSetup(t *testing.T, f func(t *testing.T, s *Sandbox, rt string)) {
	for _, rt := range runtimesUnderTest(t) {
		for _, pool := range []int{-1, 1} {
			name := fmt.Sprintf("%s/pool=%d", rt, max(pool, 0))
			t.Run(name, func(t *testing.T) {
				opt := Options{PoolSize: pool}
				if rt != "runc" {
					opt.Runtime = rt
				}
				s := newTest(t, opt)
				if pool > 0 {
					waitPool(t, s, pool)
				}
				f(t, s, rt)
			})
		}
	}
}

// forEachRuntime runs f with a sandbox under each runtime.
func forEachRuntime(t *testing.T, opt Options, f func(t *testing.T, s *Sandbox, rt string)) {
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) {
			o := opt
			if rt != "runc" {
				o.Runtime = rt
			}
			f(t, newTest(t, o), rt)
		})
	}
}

const backgroundCode = `import subprocess, os
subprocess.Popen(['sleep', '1000'], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/bin/sleep', ['sleep', '1000'])
    os._exit(0)
os.wait()
print('done')
`

// TestBackgroundProcesses: a call ends when the code's main program ends,
// whatever it left running; a one-call sandbox stops the leftovers and
// says so, a session keeps them running and says so.
func TestBackgroundProcesses(t *testing.T) {
	forEachSetup(t, func(t *testing.T, s *Sandbox, rt string) {
		res := s.Run(context.Background(), Request{Code: backgroundCode, Timeout: 20 * time.Second})
		if res.ExitCode != 0 || res.Error != ErrNone || res.Stdout != "done\n" {
			t.Errorf("exit %d error %q stdout %q stderr %q; want 0, none, done", res.ExitCode, res.Error, res.Stdout, res.Stderr)
		}
		if res.Duration > time.Second {
			t.Errorf("the code's run took %v; want it to end with its main program", res.Duration)
		}
		if !strings.Contains(res.Stderr, "left 2 processes running") {
			t.Errorf("stderr %q; want a note on the 2 processes stopped", res.Stderr)
		}
		t.Logf("%s: %v", rt, res.Duration)
	})
	s := newTest(t, Options{})
	se := startSession(t, s)
	res := se.Run(context.Background(), Request{Code: backgroundCode, Timeout: 20 * time.Second})
	if res.ExitCode != 0 || res.Stdout != "done\n" || res.Duration > time.Second || !strings.Contains(res.Stderr, "2 processes the code started are still running in this session") {
		t.Errorf("in a session: exit %d stdout %q stderr %q in %v", res.ExitCode, res.Stdout, res.Stderr, res.Duration)
	}
	res = se.Run(context.Background(), Request{Code: "import subprocess\nprint(subprocess.run(['pgrep', '-c', 'sleep'], capture_output=True, text=True).stdout.strip())"})
	if res.Stdout != "2\n" {
		t.Errorf("the session's background processes: %q %q; want 2 still running", res.Stdout, res.Stderr)
	}
}

// TestNoRootAnywhere: cold, pooled and session sandboxes, inspected by the
// engine while they run and from inside: a non-root uid, no capability
// added, all dropped, and no process of uid 0.
func TestNoRootAnywhere(t *testing.T) {
	probe := `import json, os, time
uids = {}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            for l in open(f"/proc/{p}/status"):
                if l.startswith("Uid:"):
                    uids[p] = [int(x) for x in l.split()[1:]]
        except OSError:
            pass
print(json.dumps(uids), flush=True)
time.sleep(3)
`
	check := func(t *testing.T, s *Sandbox, run func(callID string) Result, label map[string]string) {
		done := make(chan Result, 1)
		callID := NewID()
		go func() { done <- run(callID) }()
		if label == nil {
			label = map[string]string{LabelCall: callID}
		}
		// Every running sandbox of the label (a pool refills beside the
		// call's): the engine's inspection of each.
		var raws []json.RawMessage
		for deadline := time.Now().Add(20 * time.Second); raws == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			cs, _ := s.lst.List(context.Background(), label)
			for _, c := range cs {
				if st, err := s.ctr.Inspect(context.Background(), c.ID); err == nil && st.Running {
					raws = append(raws, st.Raw)
				}
			}
		}
		res := <-done
		var uids map[string][]int
		if err := json.Unmarshal([]byte(res.Stdout), &uids); err != nil || len(uids) < 2 {
			t.Fatalf("probe: %q %q %v", res.Stdout, res.Stderr, err)
		}
		for pid, ids := range uids {
			for _, id := range ids {
				if id == 0 {
					t.Errorf("process %s has uid 0: %v", pid, ids)
				}
			}
		}
		if raws == nil {
			t.Fatal("could not inspect the running sandbox")
		}
		for _, raw := range raws {
			var in struct {
				Config     struct{ User string }
				HostConfig struct{ CapAdd, CapDrop []string }
			}
			json.Unmarshal(raw, &in)
			if !nonRootUser(in.Config.User) || len(in.HostConfig.CapAdd) != 0 || strings.Join(in.HostConfig.CapDrop, ",") != "ALL" {
				t.Errorf("inspection: User %q CapAdd %v CapDrop %v; want non-zero ids, none added, ALL dropped", in.Config.User, in.HostConfig.CapAdd, in.HostConfig.CapDrop)
			}
			t.Logf("user %s, CapAdd %v, CapDrop %v", in.Config.User, in.HostConfig.CapAdd, in.HostConfig.CapDrop)
		}
		t.Logf("%d processes inside, none of uid 0", len(uids))
	}
	t.Run("cold", func(t *testing.T) {
		s := newTest(t, Options{PoolSize: -1})
		check(t, s, func(id string) Result { return s.Run(context.Background(), Request{Code: probe, CallID: id}) }, nil)
	})
	t.Run("pooled", func(t *testing.T) {
		s := newTest(t, Options{PoolSize: 1})
		waitPool(t, s, 1)
		check(t, s, func(string) Result { return s.Run(context.Background(), Request{Code: probe}) }, map[string]string{LabelOwner: s.owner})
	})
	t.Run("session", func(t *testing.T) {
		s := newTest(t, Options{PoolSize: -1})
		se := startSession(t, s)
		check(t, s, func(string) Result { return se.Run(context.Background(), Request{Code: probe}) }, map[string]string{LabelSession: "true", LabelOwner: s.owner})
	})
}

// TestKilledFromOutside: a sandbox killed or removed from outside pybox in
// the middle of a call is sandbox_lost, with a note, in a one-call sandbox
// and in a session; the note says what was sent and who sends it.
func TestKilledFromOutside(t *testing.T) {
	s := newTest(t, Options{PoolSize: -1})
	code := "import time\nprint('up', flush=True)\ntime.sleep(60)"
	for _, how := range []string{"kill", "rm"} {
		for _, session := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/session=%v", how, session), func(t *testing.T) {
				done := make(chan Result, 1)
				var id string
				if session {
					se := startSession(t, s)
					id = se.b.id
					go func() { done <- se.Run(context.Background(), Request{Code: code}) }()
				} else {
					callID := NewID()
					go func() { done <- s.Run(context.Background(), Request{Code: code, CallID: callID}) }()
					for deadline := time.Now().Add(20 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
						if cs, _ := s.lst.List(context.Background(), map[string]string{LabelCall: callID}); len(cs) == 1 {
							id = cs[0].ID
						}
					}
				}
				time.Sleep(time.Second) // the code is running
				args := map[string][]string{"kill": {"kill", id}, "rm": {"rm", "-f", id}}[how]
				if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
					t.Fatalf("docker %v: %v %s", args, err, out)
				}
				res := <-done
				// The engine removes a sandbox as it exits, so docker rm -f
				// and docker kill leave the same account: a SIGKILL asked for.
				want := "killed from outside pybox (SIGKILL: `docker kill` or `docker rm -f`"
				if res.Error != ErrSandboxLost || res.Stdout != "up\n" || !strings.Contains(res.Stderr, want) {
					t.Errorf("error %q exit %d stdout %q stderr %q; want sandbox_lost and %q", res.Error, res.ExitCode, res.Stdout, res.Stderr, want)
				}
			})
		}
	}
}

// TestJunkOnEveryDescriptor: code that writes junk into every descriptor it
// holds cannot make a one-call sandbox report anything but its own result.
func TestJunkOnEveryDescriptor(t *testing.T) {
	s := newTest(t, Options{})
	for _, junk := range []string{`[1]\n`, `{"archive": "zz"}\n`, `{"exit_code": 99999999}\n`, `\x44\x00\x00\x00\x10{"seq": 1, "exit": 99}`, strings.Repeat("z", 70000) + `\n`} {
		res := s.Run(context.Background(), Request{Code: "import os, sys\nfor fd in os.listdir('/proc/self/fd'):\n    if int(fd) > 2:\n        try:\n            os.write(int(fd), b'" + junk + "')\n        except OSError:\n            pass\nprint('wrote')\nsys.exit(7)"})
		if res.ExitCode != 7 || res.Error != ErrNone || res.Stdout != "wrote\n" {
			t.Errorf("junk %.20q: exit %d error %q stdout %q stderr %q; want 7, none, wrote", junk, res.ExitCode, res.Error, res.Stdout, res.Stderr)
		}
	}
}

// TestExit137IsNotMemory: the code's own exit status 137 is not a memory
// kill, under either runtime, with a child killed for memory before it.
func TestExit137IsNotMemory(t *testing.T) {
	forEachRuntime(t, Options{}, func(t *testing.T, s *Sandbox, rt string) {
		codes := []string{"import sys\nsys.exit(137)"}
		if rt == "runc" {
			// Under gVisor any process's memory kill ends the whole
			// sandbox: there is no child to lose while the code goes on.
			codes = append(codes, "import subprocess, sys\nsubprocess.run([sys.executable, '-c', \"s = 'a' * 600_000_000\"])\nsys.exit(137)")
		}
		for _, code := range codes {
			res := s.Run(context.Background(), Request{Code: code})
			if res.ExitCode != 137 || res.Error != ErrNone {
				t.Errorf("%q: exit %d error %q stderr %q; want 137 and no error", code, res.ExitCode, res.Error, res.Stderr)
			}
		}
	})
}

// TestKernelLimitsNotShared: with a uid per sandbox, one sandbox using up a
// per-user kernel limit (128 inotify instances) leaves another's alone.
func TestKernelLimitsNotShared(t *testing.T) {
	s := newTest(t, Options{})
	se := startSession(t, s)
	hog := se.Run(context.Background(), Request{Code: `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while True:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
print(len(fds), os.strerror(ctypes.get_errno()))
`})
	if !strings.Contains(hog.Stdout, "Too many open files") {
		t.Fatalf("the hog did not reach the limit: %q %q", hog.Stdout, hog.Stderr)
	}
	res := s.Run(context.Background(), Request{Code: "import ctypes\nprint(ctypes.CDLL(None).inotify_init1(0) >= 0)"})
	if res.Stdout != "True\n" {
		t.Errorf("another sandbox's inotify_init1 while the session holds %s instances: %q %q", strings.Fields(hog.Stdout)[0], res.Stdout, res.Stderr)
	}
}

// TestOutputFlushedOnInterval: output the code printed without flushing
// comes back when the call is stopped, all but at most the flush interval
// before the stop.
func TestOutputFlushedOnInterval(t *testing.T) {
	forEachRuntime(t, Options{PoolSize: -1}, func(t *testing.T, s *Sandbox, rt string) {
		res := s.Run(context.Background(), Request{Code: "import time\nprint('at start')\nwhile True:\n    print(time.time())\n    time.sleep(0.005)\n", Timeout: 2 * time.Second})
		stopped := time.Now()
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if res.Error != ErrTimeout || len(lines) < 2 || lines[0] != "at start" {
			t.Fatalf("error %q stdout %.200q", res.Error, res.Stdout)
		}
		last, err := strconv.ParseFloat(lines[len(lines)-1], 64)
		if err != nil {
			t.Fatalf("the last line %q: %v", lines[len(lines)-1], err)
		}
		// The stop reaches the runner a moment before the result
		// comes back; allow the interval and scheduling on a busy machine.
		gap := time.Duration((float64(stopped.UnixNano())/1e9 - last) * float64(time.Second))
		if gap > flushInterval+400*time.Millisecond {
			t.Errorf("the last line kept was printed %v before the result; want at most about the %v flush interval", gap, flushInterval)
		}
		t.Logf("%s: %d lines, the last printed %v before the result", rt, len(lines), gap.Round(time.Millisecond))
	})
}

// TestThreadsAndProcesses: the code can start threads and processes under
// each runtime (under gVisor only thanks to the runner's clone3 filter),
// and still cannot make namespaces.
func TestThreadsAndProcesses(t *testing.T) {
	forEachRuntime(t, Options{}, func(t *testing.T, s *Sandbox, rt string) {
		res := s.Run(context.Background(), Request{Code: `import concurrent.futures, subprocess, os, ctypes, errno
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    print(sum(ex.map(lambda x: x * x, range(10))))
print(subprocess.run(["echo", "spawned"], capture_output=True, text=True).stdout.strip())
libc = ctypes.CDLL(None, use_errno=True)
print(libc.syscall(272, 0x10000000), errno.errorcode[ctypes.get_errno()])
`})
		if res.Stdout != "285\nspawned\n-1 EPERM\n" || res.ExitCode != 0 {
			t.Errorf("threads, a process, unshare: %q %q", res.Stdout, res.Stderr)
		}
	})
}

// TestCallEndsAtItsMainProgram: a one-call sandbox reports the call as its
// main program ends, without waiting for the process's teardown, and
// whatever the code does to the worker's descriptors, the exit status and
// the output are its own: closing them all, or opening a file under the
// status pipe's number, makes the runner fall back to the kernel's word.
func TestCallEndsAtItsMainProgram(t *testing.T) {
	tests := []struct {
		name, code, stdout string
		exit               int
	}{
		{"plain", "import sys\nprint('hi')\nsys.exit(7)", "hi\n", 7},
		{"every descriptor closed", "import os, sys\nprint('hi', flush=True)\nos.closerange(3, 1 << 16)\nsys.exit(5)", "hi\n", 5},
		{"a file in the status pipe's place", "import os, sys\nprint('hi', flush=True)\nos.closerange(3, 1 << 16)\n" +
			"fds = [os.open('/tmp/f%d' % i, os.O_CREAT | os.O_WRONLY) for i in range(8)]\nsys.exit(4)", "hi\n", 4},
		{"a forged status line", "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"seq\": 1, \"exit_code\": 0}\\n')\n    except OSError:\n        pass\nprint('after')\nraise SystemExit(3)", "", -1},
	}
	forEachSetup(t, func(t *testing.T, s *Sandbox, rt string) {
		for _, tc := range tests {
			res := s.Run(context.Background(), Request{Code: tc.code, Timeout: 20 * time.Second})
			if tc.exit < 0 {
				// The code may end its own call early with a status of its
				// choosing (what it could do by exiting): nothing outlives it.
				if res.Error != ErrNone || (res.ExitCode != 0 && res.ExitCode != 3) {
					t.Errorf("%s: exit %d error %q stderr %q; want its own exit status, 0 or 3", tc.name, res.ExitCode, res.Error, res.Stderr)
				}
				continue
			}
			if res.ExitCode != tc.exit || res.Stdout != tc.stdout || res.Error != ErrNone {
				t.Errorf("%s: exit %d stdout %q error %q stderr %q; want %d %q", tc.name, res.ExitCode, res.Stdout, res.Error, res.Stderr, tc.exit, tc.stdout)
			}
			if res.Timing.Run <= 0 || res.Timing.Run != res.Duration {
				t.Errorf("%s: timing %+v; want the run's time, as Duration (%v)", tc.name, res.Timing, res.Duration)
			}
		}
		want := SourceCold
		if s.pool != nil {
			want = SourcePool
		}
		if res := s.Run(context.Background(), Request{Code: "print(1)"}); res.Timing.Source != want {
			t.Errorf("a call's sandbox came from %q; want %q", res.Timing.Source, want)
		}
	})
}
