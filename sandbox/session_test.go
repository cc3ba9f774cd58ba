package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestSession(t *testing.T) {
	s := newTest(t, Options{})
	ctx := context.Background()
	se, res := s.StartSession(ctx)
	if se == nil {
		t.Fatalf("StartSession: %s %s", res.Error, res.Stderr)
	}
	defer se.Close(ctx)
	steps := []struct {
		code       string
		files      []InputFile
		wantStdout string
		wantExit   int
		wantErr    ErrorKind
		wantFile   string
	}{
		{code: "x = 41\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nopen('/tmp/state.txt', 'w').write('kept')\nopen('/mnt/outputs/one.txt', 'w').write('1')", wantFile: "one.txt"},
		{code: "print(x + 1)", wantStdout: "42\n"},
		{code: "print(df.a.sum(), pd.__name__, open('/tmp/state.txt').read(), open('/mnt/user-data/in.txt').read())", files: []InputFile{{Path: "in.txt", Data: []byte("in")}}, wantStdout: "6 pandas kept in\n"},
		{code: "import sys\nprint('bye')\nsys.exit(3)", wantStdout: "bye\n", wantExit: 3},
		{code: "print('still here', x)", wantStdout: "still here 41\n"},
		{code: "raise ValueError('boom')", wantExit: 1},
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
		if i == 5 && !strings.Contains(r.Stderr, "ValueError: boom") {
			t.Errorf("call 6: stderr %q", r.Stderr)
		}
	}

	// A second session does not see the first's state.
	other, res := s.StartSession(ctx)
	if other == nil {
		t.Fatal(res.Stderr)
	}
	defer other.Close(ctx)
	r := other.Run(ctx, Request{Code: "import os\nprint('x' in globals(), os.path.exists('/tmp/state.txt'))"})
	if r.Stdout != "False False\n" {
		t.Errorf("a second session sees the first's state: %q %q", r.Stdout, r.Stderr)
	}
}

func TestSessionTimeoutAndMemoryKill(t *testing.T) {
	s := newTest(t, Options{})
	ctx := context.Background()
	se, res := s.StartSession(ctx)
	if se == nil {
		t.Fatal(res.Stderr)
	}
	defer se.Close(ctx)
	se.Run(ctx, Request{Code: "y = 7"})
	start := time.Now()
	r := se.Run(ctx, Request{Code: "print('spinning', flush=True)\nwhile True: pass", Timeout: time.Second})
	if r.Error != ErrTimeout || r.ExitCode != ExitTimeout || r.Stdout != "spinning\n" || !strings.Contains(r.Stderr, "the session goes on") {
		t.Errorf("timeout in a session: %q exit %d stdout %q stderr %q", r.Error, r.ExitCode, r.Stdout, r.Stderr)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("the interrupted call took %v", took)
	}
	if r := se.Run(ctx, Request{Code: "print(y * 6)"}); r.Stdout != "42\n" {
		t.Errorf("after the interrupt: %q %q %q", r.Stdout, r.Stderr, r.Error)
	}
	// Code that ignores the interrupt ends the session.
	r = se.Run(ctx, Request{Code: "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(0.1)", Timeout: time.Second})
	if r.Error != ErrTimeout || !strings.Contains(r.Stderr, "session was ended") {
		t.Errorf("an unstoppable call: %q %q", r.Error, r.Stderr)
	}
	if r := se.Run(ctx, Request{Code: "print(1)"}); r.Error != ErrSessionExpired {
		t.Errorf("after the session ended: %q %q", r.Error, r.Stderr)
	}

	mem, res := s.StartSession(ctx)
	if mem == nil {
		t.Fatal(res.Stderr)
	}
	defer mem.Close(ctx)
	r = mem.Run(ctx, Request{Code: "s = 'a' * 600_000_000"})
	if r.Error != ErrMemoryLimit || r.ExitCode != ExitKilled {
		t.Errorf("a memory kill in a session: %q exit %d stderr %q", r.Error, r.ExitCode, r.Stderr)
	}
	if r := mem.Run(ctx, Request{Code: "print(1)"}); r.Error != ErrSessionExpired {
		t.Errorf("after a memory kill: %q %q", r.Error, r.Stderr)
	}
}
