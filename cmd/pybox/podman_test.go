package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pybox/pybox/internal/testenv"
)

// TestPodman runs the core acceptance calls through a real pybox server
// whose engine is Podman's Docker-compatible API, with the warm pool off
// and on, then checks that nothing is left in Podman.
func TestPodman(t *testing.T) {
	host, ref := testenv.Podman(t, image())
	const canary = "PODMAN_CANARY_5f2c9a"
	for _, pool := range []string{"0", "2"} {
		t.Run("pool="+pool, func(t *testing.T) {
			p := startProc(t, []string{"DOCKER_HOST=" + host, "PYBOX_IMAGE=" + ref, "PYBOX_POOL=" + pool, "PYBOX_MAX_CONCURRENT=3", "PYBOX_SECRET_CANARY=" + canary})
			coreCalls(t, p, canary, "['lo']")
			prefix := p.ownerPrefix()
			p.endStdio(t)
			if left := containersAt(t, host, prefix); len(left) > 0 {
				t.Errorf("containers left in Podman after the server exited: %v", left)
			}
		})
	}
	t.Run("a runtime Podman would ignore", func(t *testing.T) {
		// Podman's compatible API drops HostConfig.Runtime: asking for gVisor
		// must not run the code under runc.
		cmd := exec.Command(binary, "exec", "--runtime", "runsc", "-c", "print('ran')")
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+host, "PYBOX_IMAGE="+ref, "PYBOX_POOL=0")
		out, _ := cmd.Output()
		var r map[string]any
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if stderr, _ := r["stderr"].(string); r["error"] != "sandbox_unavailable" || r["stdout"] != "" || !strings.Contains(stderr, "ignores the requested runtime") {
			t.Errorf("got %v; want sandbox_unavailable saying Podman ignores the runtime, and nothing run", r)
		}
		if left := containersAt(t, host, ""); len(left) > 0 {
			t.Errorf("containers left in Podman: %v", left)
		}
	})
	t.Run("doctor", func(t *testing.T) {
		cmd := exec.Command(binary, "doctor")
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+host, "PYBOX_IMAGE="+ref)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Podman") {
			t.Errorf("pybox doctor against Podman: %v; want success naming Podman\n%s", err, out)
		}
	})
}

// coreCalls are the core acceptance calls through a server, on any engine:
// results, tracebacks, exit codes, timeout, memory kill, output cap, bytes,
// walls from inside (ifaces: the network devices the sandbox has, as
// Python prints their sorted list), files in and out, a chart, a session,
// concurrency.
func coreCalls(t *testing.T, p *proc, canary, ifaces string) {
	sc := func(code string, timeout float64) map[string]any {
		t.Helper()
		args := map[string]any{"code": code}
		if timeout > 0 {
			args["timeout"] = timeout
		}
		return p.runPython(args, 90*time.Second).Result.StructuredContent
	}
	raw := p.request("tools/list", map[string]any{}, 10*time.Second)
	if !bytes.Contains(raw, []byte(`"run_python"`)) || !bytes.Contains(raw, []byte(`"outputSchema"`)) {
		t.Errorf("tools/list = %.300s; want run_python with its schemas", raw)
	}
	t.Run("arithmetic", func(t *testing.T) {
		r := sc("print(round(47/1283*100, 3))", 0)
		if r["stdout"] != "3.663\n" || r["exit_code"] != 0.0 || r["execution_time"].(float64) <= 0 {
			t.Errorf("got %v; want 3.663, exit 0, positive time", r)
		}
	})
	t.Run("traceback", func(t *testing.T) {
		r := sc("a = 1\nb = 2\nprint(c)\n", 0)
		stderr, _ := r["stderr"].(string)
		if r["exit_code"] != 1.0 || !strings.Contains(stderr, `File "main.py", line 3`) || !strings.Contains(stderr, "NameError") {
			t.Errorf("got %v; want exit 1 and a NameError on main.py line 3", r)
		}
	})
	t.Run("sys.exit", func(t *testing.T) {
		if r := sc("import sys; sys.exit(3)", 0); r["exit_code"] != 3.0 {
			t.Errorf("got %v; want exit 3", r)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		r := sc("print('before', flush=True)\nwhile True: pass", 2)
		if took := time.Since(start); r["exit_code"] != 124.0 || r["error"] != "timeout" || r["stdout"] != "before\n" || took > 6*time.Second {
			t.Errorf("got %v after %v; want 124, timeout, what was printed, by about 2 s", r, took)
		}
	})
	t.Run("memory", func(t *testing.T) {
		r := sc("x = bytearray(600 * 1024 * 1024)\nprint('survived')", 0)
		if r["exit_code"] != 137.0 || r["error"] != "memory_limit" {
			t.Errorf("got %v; want 137 and memory_limit", r)
		}
		// A kill the code does itself is not a memory kill.
		if r := sc("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", 0); r["exit_code"] != 137.0 || r["error"] != nil {
			t.Errorf("self-kill: got %v; want 137 without an error kind", r)
		}
	})
	t.Run("flood", func(t *testing.T) {
		r := sc("import sys\nprint('HEAD')\nwhile True:\n    sys.stdout.write('y' * 65536 + '\\n')", 3)
		out, _ := r["stdout"].(string)
		if r["error"] != "timeout" || r["truncated"] != true || !strings.HasPrefix(out, "HEAD\n") || len(out) > 200<<10 {
			t.Errorf("flood: error %v truncated %v, %d bytes of stdout; want timeout, truncated, head kept, capped", r["error"], r["truncated"], len(out))
		}
	})
	t.Run("bytes", func(t *testing.T) {
		r := sc("import sys\nsys.stdout.buffer.write(bytes(range(256)))", 0)
		out, _ := r["stdout"].(string)
		if r["exit_code"] != 0.0 || !strings.HasPrefix(out, "\x00\x01\x02") || !strings.Contains(out, "\ufffd") {
			t.Errorf("got %q; want the bytes as valid UTF-8 with replacement characters", out)
		}
	})
	t.Run("walls", func(t *testing.T) {
		r := sc(`import os
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
print(os.getuid(), os.getgid())
print(st["CapEff"].strip(), st["CapBnd"].strip(), st["NoNewPrivs"].strip(), st["Seccomp"].strip())
print(sorted(os.listdir("/sys/class/net")))
try:
    open("/etc/pybox-write-test", "w")
    print("root writable")
except OSError as e:
    print("root read-only", e.errno)
print(any("`+canary+`" in v for v in os.environ.values()))
import socket
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    print("network reachable")
except OSError:
    print("no network")
`, 0)
		// The first line is the sandbox's own uid and gid, from the range.
		out, _ := r["stdout"].(string)
		ids, rest, _ := strings.Cut(out, "\n")
		uid, gid, _ := strings.Cut(ids, " ")
		if uid != gid || len(uid) != 10 || !strings.HasPrefix(uid, "200") {
			t.Errorf("the sandbox runs as %q; want a uid of its own from the range, its gid the same", ids)
		}
		want := "0000000000000000 0000000000000000 1 2\n" + ifaces + "\nroot read-only 30\nFalse\nno network\n"
		if rest != want {
			t.Errorf("walls inside the sandbox:\n%v\nwant:\n%s", rest, want)
		}
	})
	t.Run("files", func(t *testing.T) {
		raw := p.request("tools/call", map[string]any{"name": "run_python", "arguments": map[string]any{
			"code": `import pandas as pd, matplotlib.pyplot as plt
df = pd.read_csv("/mnt/user-data/data.csv")
print(df["v"].sum())
df.plot(); plt.savefig("/mnt/outputs/plot.png"); plt.close("all")`,
			"files": []map[string]any{{"path": "data.csv", "content": base64.StdEncoding.EncodeToString([]byte("v\n1.5\n2.25\n")), "encoding": "base64"}},
		}}, 90*time.Second)
		var a struct {
			Result struct {
				Content []struct {
					Type     string `json:"type"`
					Data     string `json:"data"`
					MimeType string `json:"mimeType"`
				} `json:"content"`
				StructuredContent map[string]any `json:"structuredContent"`
			} `json:"result"`
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		if a.Result.StructuredContent["stdout"] != "3.75\n" {
			t.Errorf("got %v; want 3.75", a.Result.StructuredContent)
		}
		pngs := 0
		for _, c := range a.Result.Content {
			if c.Type == "image" && c.MimeType == "image/png" {
				b, err := base64.StdEncoding.DecodeString(c.Data)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := png.Decode(bytes.NewReader(b)); err != nil {
					t.Errorf("the image is not a PNG: %v", err)
				}
				pngs++
			}
		}
		if pngs != 1 {
			t.Errorf("%d PNG images came back; want 1: %.400s", pngs, raw)
		}
	})
	t.Run("session", func(t *testing.T) {
		first := p.runPython(map[string]any{"code": "x = 41", "session_id": "new"}, 90*time.Second).Result.StructuredContent
		id, _ := first["session_id"].(string)
		if id == "" {
			t.Fatalf("no session id: %v", first)
		}
		r := p.runPython(map[string]any{"code": "print(x + 1)", "session_id": id}, 90*time.Second).Result.StructuredContent
		if r["stdout"] != "42\n" {
			t.Errorf("in the session: %v; want 42", r)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		got := make([]any, 6)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i] = sc("import time; time.sleep(0.5); print("+string(rune('0'+i))+")", 0)["stdout"]
			}()
		}
		wg.Wait()
		for i, out := range got {
			if out != string(rune('0'+i))+"\n" {
				t.Errorf("call %d printed %q", i, out)
			}
		}
	})
}
