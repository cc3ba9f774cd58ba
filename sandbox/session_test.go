package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

func startSession(t *testing.T, s *Sandbox) *Session {
	t.Helper()
	se, res := s.StartSession(context.Background())
	if se == nil {
		t.Fatalf("StartSession: %s %s", res.Error, res.Stderr)
	}
	t.Cleanup(func() { se.Close(context.Background()) })
	return se
}

func TestSession(t *testing.T) {
	s := newTest(t, Options{})
	ctx := context.Background()
	se := startSession(t, s)
	steps := []struct {
		code       string
		files      []InputFile
		wantStdout string
		wantExit   int
		wantErr    ErrorKind
		wantFile   string
		wantStderr string
	}{
		{code: "x = 41\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nopen('/tmp/state.txt', 'w').write('kept')\nopen('/mnt/outputs/one.txt', 'w').write('1')", wantFile: "one.txt"},
		{code: "print(x + 1)", wantStdout: "42\n"},
		{code: "print(df.a.sum(), pd.__name__, open('/tmp/state.txt').read(), open('/mnt/user-data/in.txt').read())", files: []InputFile{{Path: "in.txt", Data: []byte("in")}}, wantStdout: "6 pandas kept in\n"},
		{code: "import sys\nprint('bye')\nsys.exit(3)", wantStdout: "bye\n", wantExit: 3},
		{code: "print('still here', x)", wantStdout: "still here 41\n"},
		{code: "def f(n):\n    return 1 / n\n", wantStdout: ""},
		// Every call's code is main.py; a frame of an earlier call's code
		// shows that call's line.
		{code: "y = 1\ny = 2\nf(0)\n", wantExit: 1, wantStderr: "  File \"main.py\", line 3, in <module>\n    f(0)\n    ~^^^\n  File \"main.py\", line 2, in f\n    return 1 / n\n"},
		{code: "raise ValueError('boom')", wantExit: 1, wantStderr: "File \"main.py\", line 1, in <module>\n    raise ValueError('boom')\nValueError: boom"},
		{code: "open('/mnt/outputs/two.txt', 'w').write('2')\nprint(len(open('/mnt/outputs/one.txt').read()))", wantStdout: "1\n", wantFile: "two.txt"},
	}
	for i, st := range steps {
		r := se.Run(ctx, Request{Code: st.code, Files: st.files})
		if r.Stdout != st.wantStdout || r.ExitCode != st.wantExit || r.Error != st.wantErr {
			t.Errorf("call %d: stdout %q exit %d error %q (stderr %q); want %q %d %q", i+1, r.Stdout, r.ExitCode, r.Error, r.Stderr, st.wantStdout, st.wantExit, st.wantErr)
		}
		if st.wantFile != "" && (len(r.Files) != 1 || r.Files[0].Path != st.wantFile) {
			t.Errorf("call %d: files %v; want only the new %s", i+1, names(r.Files), st.wantFile)
		}
		if !strings.Contains(r.Stderr, st.wantStderr) {
			t.Errorf("call %d: stderr %q; want it to hold %q", i+1, r.Stderr, st.wantStderr)
		}
	}

	// A second session does not see the first's state.
	other := startSession(t, s)
	r := other.Run(ctx, Request{Code: "import os\nprint('x' in globals(), os.path.exists('/tmp/state.txt'))"})
	if r.Stdout != "False False\n" {
		t.Errorf("a second session sees the first's state: %q %q", r.Stdout, r.Stderr)
	}
}

// TestSessionRestarts: a timeout interrupts as Ctrl-C would and the session
// goes on; code that ignores the interrupt, exits its process or is killed
// for memory gets a fresh Python in the same sandbox, files kept, and the
// result says so.
func TestSessionRestarts(t *testing.T) {
	s := newTest(t, Options{})
	ctx := context.Background()
	se := startSession(t, s)
	se.Run(ctx, Request{Code: "y = 7\nopen('/tmp/kept', 'w').write('kept')"})
	r := se.Run(ctx, Request{Code: "print('spinning', flush=True)\nwhile True: pass", Timeout: time.Second})
	if r.Error != ErrTimeout || r.ExitCode != ExitTimeout || r.Stdout != "spinning\n" || !strings.Contains(r.Stderr, "KeyboardInterrupt") || !strings.Contains(r.Stderr, "the session goes on") {
		t.Errorf("timeout in a session: %q exit %d stdout %q stderr %q", r.Error, r.ExitCode, r.Stdout, r.Stderr)
	}
	if r := se.Run(ctx, Request{Code: "print(y * 6)"}); r.Stdout != "42\n" {
		t.Errorf("after the interrupt: %q %q %q", r.Stdout, r.Stderr, r.Error)
	}
	restarted := func(what string, r Result) {
		t.Helper()
		if !strings.Contains(r.Stderr, "restarted") {
			t.Errorf("%s: stderr %q; want a note that the Python process was restarted", what, r.Stderr)
		}
		after := se.Run(ctx, Request{Code: "print('y' in globals(), open('/tmp/kept').read())"})
		if after.Stdout != "False kept\n" || after.Error != ErrNone {
			t.Errorf("after %s: %q %q %q; want a fresh Python and the files kept", what, after.Stdout, after.Stderr, after.Error)
		}
		se.Run(ctx, Request{Code: "y = 7"})
	}
	start := time.Now()
	r = se.Run(ctx, Request{Code: "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(0.1)", Timeout: time.Second})
	if r.Error != ErrTimeout {
		t.Errorf("an uninterruptible call: %q %q", r.Error, r.Stderr)
	}
	if took := time.Since(start); took > time.Second+sessionGrace+stopGrace {
		t.Errorf("an uninterruptible call took %v", took)
	}
	restarted("an uninterruptible call", r)

	start = time.Now()
	r = se.Run(ctx, Request{Code: "import os\nprint('going', flush=True)\nos._exit(5)"})
	if r.ExitCode != 5 || r.Error != ErrNone || r.Stdout != "going\n" {
		t.Errorf("os._exit(5): exit %d error %q stdout %q", r.ExitCode, r.Error, r.Stdout)
	}
	if took := time.Since(start); took > sessionGrace {
		t.Errorf("a call whose process exited took %v; no fixed wait is due", took)
	}
	restarted("os._exit", r)

	r = se.Run(ctx, Request{Code: "s = 'a' * 600_000_000"})
	if r.Error != ErrMemoryLimit || r.ExitCode != ExitKilled {
		t.Errorf("a memory kill in a session: %q exit %d stderr %q", r.Error, r.ExitCode, r.Stderr)
	}
	restarted("a memory kill", r)
}

// TestSessionInputFiles: a later call's files replace an earlier call's,
// file by folder and folder by file, and a full input area is an error of
// that call alone.
func TestSessionInputFiles(t *testing.T) {
	s := newTest(t, Options{})
	ctx := context.Background()
	se := startSession(t, s)
	list := "import os\nfor d, _, fs in sorted(os.walk('/mnt/user-data')):\n    for f in sorted(fs):\n        p = os.path.join(d, f)\n        print(p[14:], open(p).read())\n"
	steps := []struct {
		files []InputFile
		want  string
	}{
		{[]InputFile{{Path: "x", Data: []byte("file x")}}, "/x file x\n"},
		{[]InputFile{{Path: "x/y", Data: []byte("file x/y")}}, "/x/y file x/y\n"},
		{[]InputFile{{Path: "d/f", Data: []byte("d/f")}}, "/d/f d/f\n/x/y file x/y\n"},
		{[]InputFile{{Path: "d", Data: []byte("now a file")}}, "/d now a file\n/x/y file x/y\n"},
		{[]InputFile{{Path: "x/y", Data: []byte("again")}}, "/d now a file\n/x/y again\n"},
	}
	for i, st := range steps {
		r := se.Run(ctx, Request{Code: list, Files: st.files})
		if r.Stdout != st.want || r.Error != ErrNone {
			t.Errorf("call %d: %q %q %q; want %q", i+1, r.Stdout, r.Stderr, r.Error, st.want)
		}
	}
	big := make([]byte, 6<<20)
	if r := se.Run(ctx, Request{Code: "print('first')", Files: []InputFile{{Path: "big1", Data: big}}}); r.Stdout != "first\n" {
		t.Fatalf("a 6 MiB file: %q %q %q", r.Stdout, r.Stderr, r.Error)
	}
	r := se.Run(ctx, Request{Code: "print('second')", Files: []InputFile{{Path: "big2", Data: big}}})
	if r.Error != ErrInvalidInput || r.Stdout != "" || !strings.Contains(r.Stderr, "No space left") || !strings.Contains(r.Stderr, "os.remove") {
		t.Errorf("a second 6 MiB file: %q %q %q; want invalid_input saying the area is full and what to do", r.Stdout, r.Stderr, r.Error)
	}
	r = se.Run(ctx, Request{Code: "import os\nos.remove('/mnt/user-data/big1')\nprint(sorted(os.listdir('/mnt/user-data')))"})
	if r.Stdout != "['d', 'x']\n" {
		t.Errorf("after the full disk: %q %q %q; want the session alive, the partial file gone", r.Stdout, r.Stderr, r.Error)
	}
	if r := se.Run(ctx, Request{Code: "print('third')", Files: []InputFile{{Path: "big2", Data: big}}}); r.Stdout != "third\n" {
		t.Errorf("once room was made: %q %q %q", r.Stdout, r.Stderr, r.Error)
	}
}

// TestSessionQueuedCall: a call queued behind a running call keeps its own
// timeout, which counts its wait.
func TestSessionQueuedCall(t *testing.T) {
	s := newTest(t, Options{})
	ctx := context.Background()
	se := startSession(t, s)
	first := make(chan Result, 1)
	go func() { first <- se.Run(ctx, Request{Code: "import time\ntime.sleep(4)\nprint('first')"}) }()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	r := se.Run(ctx, Request{Code: "print('second')", Timeout: time.Second})
	took := time.Since(start)
	if r.Error != ErrTooManyRequests || r.Stdout != "" {
		t.Errorf("a queued call: %q %q %q; want too_many_requests", r.Error, r.Stdout, r.Stderr)
	}
	if took > 2*time.Second {
		t.Errorf("a queued call with a 1 s timeout returned after %v", took)
	}
	if r := <-first; r.Stdout != "first\n" {
		t.Errorf("the first call: %q %q", r.Stdout, r.Stderr)
	}
}

// TestSessionStatusPipe: code that writes into every descriptor it holds,
// pybox's status pipe among them, gets a clear result with valid fields;
// the session goes on with a fresh Python.
func TestSessionStatusPipe(t *testing.T) {
	s := newTest(t, Options{})
	ctx := context.Background()
	for _, junk := range []string{`[1]\n`, `{"archive": "zz"}\n`, `{"seq": 1, "exit_code": 99999999}\n`, strings.Repeat("z", 70000) + `\n`} {
		se := startSession(t, s)
		se.Run(ctx, Request{Code: "v = 1"})
		r := se.Run(ctx, Request{Code: "import os\nfor fd in os.listdir('/proc/self/fd'):\n    try:\n        os.write(int(fd), b'" + junk + "')\n    except OSError:\n        pass\nprint('wrote')"})
		if r.ExitCode < 0 || r.ExitCode > 255 || r.Error == ErrSandboxUnavailable {
			t.Errorf("junk %.20q: exit %d error %q", junk, r.ExitCode, r.Error)
		}
		if r := se.Run(ctx, Request{Code: "print('next')"}); r.Stdout != "next\n" || r.Error != ErrNone {
			t.Errorf("junk %.20q: the next call: %q %q %q", junk, r.Stdout, r.Stderr, r.Error)
		}
	}
}
