package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pybox/pybox/internal/testenv"
)

// The fault suite: each fault a deployment meets, injected against the real
// binary and a real engine. Each test checks the four fields, the error
// kind, the time the answer took and that no labelled container of the
// server is left. Faults of the engine itself (frozen, restarted) use an
// engine the test binary started for itself (testenv.Private), so no test
// signals a process it did not start.

// rawProc is a pybox over stdio whose three pipes the test holds as plain
// files: closing them is what a client's death does to it.
type rawProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  *os.File // the write end
	stdout *os.File // the read end
	stderr *os.File // the read end
	errBuf syncBuffer
	exited chan struct{}

	mu      sync.Mutex
	answers map[int]json.RawMessage
	nextID  int
}

func startRaw(t *testing.T, env ...string) *rawProc {
	t.Helper()
	p := &rawProc{t: t, exited: make(chan struct{}), answers: map[int]json.RawMessage{}}
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	p.cmd = exec.Command(binary)
	p.cmd.Env = append(append(os.Environ(), "PYBOX_IMAGE="+image(), "PYBOX_POOL=0"), env...)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = inR, outW, errW
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	errW.Close()
	p.stdin, p.stdout, p.stderr = inW, outR, errR
	go io.Copy(&p.errBuf, errR)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var m struct{ ID *int }
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.ID != nil {
				p.mu.Lock()
				p.answers[*m.ID] = append(json.RawMessage(nil), sc.Bytes()...)
				p.mu.Unlock()
			}
		}
	}()
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("server stderr:\n%s", p.errBuf.String())
		}
	})
	p.send("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "faults", "version": "1"}})
	waitFor(t, "the server's initialize answer", 30*time.Second, func() bool { return p.answer(1) != nil })
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	p.stdin.Write(append(b, '\n'))
	return p
}

func (p *rawProc) send(method string, params any) int {
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	p.stdin.Write(append(b, '\n'))
	return id
}

func (p *rawProc) answer(id int) json.RawMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answers[id]
}

func (p *rawProc) ownerPrefix() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/", host, p.cmd.Process.Pid)
}

// exitedCleanly waits for the process to exit and checks it exited, not
// died of a signal, with status 0.
func exitedCleanly(t *testing.T, cmd *exec.Cmd, exited <-chan struct{}, within time.Duration) {
	t.Helper()
	select {
	case <-exited:
	case <-time.After(within):
		t.Fatalf("the server did not exit within %v", within)
	}
	st := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if st.Signaled() || st.ExitStatus() != 0 {
		t.Errorf("the server ended with %v (signaled %v); want exit status 0 after its cleanup", cmd.ProcessState, st.Signaled())
	}
}

// TestFaultClientGone: a desktop client that quits mid-call (its end of
// all three pipes closed, as the kernel does when it dies) or only closes
// stdin: the server shuts down in order, not by SIGPIPE, and removes its
// pool's and the call's containers.
func TestFaultClientGone(t *testing.T) {
	testenv.Engine(t, image())
	for _, how := range []string{"killed", "stdin closed"} {
		t.Run(how, func(t *testing.T) {
			p := startRaw(t, "PYBOX_POOL=2")
			p.send("tools/call", map[string]any{"name": "run_python", "arguments": map[string]any{"code": "import time\nprint('up', flush=True)\ntime.sleep(60)", "timeout": 120}})
			waitFor(t, "the call's and the pool's containers", 60*time.Second, func() bool { return len(containersOf(t, p.ownerPrefix())) >= 3 })
			prefix := p.ownerPrefix()
			p.stdin.Close()
			if how == "killed" {
				p.stdout.Close()
				p.stderr.Close()
			}
			start := time.Now()
			exitedCleanly(t, p.cmd, p.exited, 40*time.Second)
			if left := containersOf(t, prefix); len(left) > 0 {
				t.Errorf("containers left after the client went: %v", left)
			}
			t.Logf("the server cleaned up and exited %v after its client went", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestFaultSignals: SIGINT, SIGTERM and SIGHUP, over stdio and over HTTP,
// all end the server in order with nothing left.
func TestFaultSignals(t *testing.T) {
	testenv.Engine(t, image())
	for _, transport := range []string{"stdio", "http"} {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
			t.Run(transport+"/"+sig.String(), func(t *testing.T) {
				call := map[string]any{"code": "import time\ntime.sleep(60)", "timeout": 120}
				var cmd *exec.Cmd
				var exited <-chan struct{}
				if transport == "stdio" {
					p := startRaw(t, "PYBOX_POOL=1")
					p.send("tools/call", map[string]any{"name": "run_python", "arguments": call})
					cmd, exited = p.cmd, p.exited
				} else {
					s := startServer(t, "--transport", "http")
					go callHTTP(s.addr, call)
					cmd, exited = s.cmd, s.exited
				}
				prefix := ownerOf(cmd)
				waitFor(t, "the call's container", 60*time.Second, func() bool { return len(containersOf(t, prefix)) >= 2 })
				cmd.Process.Signal(sig)
				exitedCleanly(t, cmd, exited, 40*time.Second)
				if left := containersOf(t, prefix); len(left) > 0 {
					t.Errorf("containers left after %v: %v", sig, left)
				}
			})
		}
	}
}

// serveProc is a pybox serve process on a free loopback address.
type serveProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	exited chan struct{}
}

func startServer(t *testing.T, args ...string) *serveProc {
	t.Helper()
	return startServerEnv(t, nil, args...)
}

// startServerEnv is startServer with more environment variables.
func startServerEnv(t *testing.T, env []string, args ...string) *serveProc {
	t.Helper()
	s := &serveProc{addr: freeAddr(t), stderr: &syncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(binary, append([]string{"serve", "--addr", s.addr}, args...)...)
	s.cmd.Env = append(append(os.Environ(), "PYBOX_IMAGE="+image(), "PYBOX_POOL=1"), env...)
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("server stderr:\n%s", s.stderr.String())
		}
	})
	waitFor(t, "the HTTP server", 20*time.Second, func() bool {
		c, err := net.Dial("tcp", s.addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return s
}

// TestFaultServerKilled: a server killed with SIGKILL, four calls in
// flight and its pool waiting, leaves nothing for long with no new server
// started: each runner ends when its attach does, and the engine removes
// the container; a container made but not yet started (a refill the kill
// interrupted) is removed by the server's janitor.
func TestFaultServerKilled(t *testing.T) {
	testenv.Engine(t, image())
	p := startRaw(t, "PYBOX_POOL=2", "PYBOX_MAX_CONCURRENT=4")
	const timeout = 30
	for range 4 {
		p.send("tools/call", map[string]any{"name": "run_python", "arguments": map[string]any{"code": "import time\nprint('up', flush=True)\ntime.sleep(60)", "timeout": timeout}})
	}
	waitFor(t, "four calls and the pool", 60*time.Second, func() bool { return len(containersOf(t, p.ownerPrefix())) >= 6 })
	prefix := p.ownerPrefix()
	owner := prefix + procStarted(p.cmd.Process.Pid)
	if out, err := exec.Command("docker", "create", "--label", "pybox.managed=true", "--label", "pybox.owner="+owner, image(), "true").CombinedOutput(); err != nil {
		t.Fatalf("creating a container as the server would: %v %s", err, out)
	}
	killed := time.Now()
	p.cmd.Process.Kill()
	<-p.exited
	waitFor(t, "every container of the killed server gone", (timeout+10)*time.Second, func() bool { return len(containersOf(t, prefix)) == 0 })
	t.Logf("every container of the SIGKILLed server was gone %v after the kill (its calls' deadline: %d s)", time.Since(killed).Round(time.Millisecond), timeout)
}

// TestFaultServerFrozen: a server that is stopped (SIGSTOP) rather than
// gone keeps its attach open; its sandboxes end themselves a little past
// their calls' deadline.
func TestFaultServerFrozen(t *testing.T) {
	testenv.Engine(t, image())
	p := startRaw(t)
	const timeout = 5
	for range 2 {
		p.send("tools/call", map[string]any{"name": "run_python", "arguments": map[string]any{"code": "import time\ntime.sleep(60)", "timeout": timeout}})
	}
	waitFor(t, "two calls", 60*time.Second, func() bool { return len(containersOf(t, p.ownerPrefix())) >= 2 })
	time.Sleep(time.Second) // their code runs
	prefix := p.ownerPrefix()
	frozen := time.Now()
	p.cmd.Process.Signal(syscall.SIGSTOP)
	defer p.cmd.Process.Signal(syscall.SIGCONT)
	waitFor(t, "the frozen server's containers gone", (timeout+10+10)*time.Second, func() bool { return len(containersOf(t, prefix)) == 0 })
	t.Logf("the frozen server's sandboxes ended %v after it froze (their deadline: %d s, and 10 s of margin)", time.Since(frozen).Round(time.Millisecond), timeout)
}

// callAsync starts a tools/call over stdio and returns a channel of its
// structured result and how long it took.
func (p *proc) callAsync(args map[string]any) <-chan timedAnswer {
	ch := make(chan timedAnswer, 1)
	start := time.Now()
	_, raw := p.start("tools/call", map[string]any{"name": "run_python", "arguments": args})
	go func() {
		r := <-raw
		var a toolAnswer
		json.Unmarshal(r, &a)
		ch <- timedAnswer{a, time.Since(start)}
	}()
	return ch
}

type timedAnswer struct {
	toolAnswer
	took time.Duration
}

// checkFour checks that a result has the contract's four fields.
func checkFour(t *testing.T, what string, sc map[string]any) {
	t.Helper()
	for _, k := range []string{"stdout", "stderr", "exit_code", "execution_time"} {
		if _, ok := sc[k]; !ok {
			t.Errorf("%s: the result lacks %q: %v", what, k, sc)
		}
	}
}

// TestFaultEngineFrozen: with the engine stopped (SIGSTOP), a call in
// flight returns at its timeout plus at most 2 s with what came through,
// and a call made meanwhile returns at its timeout as sandbox_unavailable;
// after the engine thaws, nothing is left.
func TestFaultEngineFrozen(t *testing.T) {
	e := testenv.Private(t, image())
	p := startProc(t, []string{"DOCKER_HOST=" + e.Host, "PYBOX_RECONCILE_INTERVAL=2s"})
	running := p.callAsync(map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(60)", "timeout": 8})
	waitFor(t, "the call's container", 60*time.Second, func() bool { return len(containersAt(t, e.Host, p.ownerPrefix())) == 1 })
	time.Sleep(time.Second) // its code runs and prints
	e.Freeze()
	frozen := time.Now()
	defer e.Thaw()
	fresh := p.callAsync(map[string]any{"code": "print('never')", "timeout": 5})

	a := <-running
	sc := a.Result.StructuredContent
	checkFour(t, "the call in flight", sc)
	if sc["error"] != "timeout" || sc["exit_code"] != 124.0 || sc["stdout"] != "started\n" || a.took > 8*time.Second+2500*time.Millisecond {
		t.Errorf("the call in flight: %v after %v; want timeout, 124, what it printed, by 8 s + 2 s", sc, a.took)
	}
	b := <-fresh
	sc = b.Result.StructuredContent
	checkFour(t, "the call made while frozen", sc)
	if sc["error"] != "sandbox_unavailable" || !b.Result.IsError || b.took > 5*time.Second+2500*time.Millisecond {
		t.Errorf("the call made while the engine was frozen: %v after %v; want sandbox_unavailable by 5 s + 2 s", sc, b.took)
	}
	t.Logf("frozen engine: the call in flight answered after %v, the new call after %v", a.took.Round(time.Millisecond), b.took.Round(time.Millisecond))
	time.Sleep(time.Until(frozen.Add(12 * time.Second)))
	e.Thaw()
	waitFor(t, "nothing left once the engine thawed", 60*time.Second, func() bool { return len(containersAt(t, e.Host, p.ownerPrefix())) == 0 })
	if a := p.runPython(map[string]any{"code": "print(1)"}, 60*time.Second); a.Result.StructuredContent["stdout"] != "1\n" {
		t.Errorf("after the thaw: %v", a.Result.StructuredContent)
	}
}

// TestFaultEngineRestart: the engine stops (SIGTERM) and starts again under
// a running server. A call whose code was handed over is never told it did
// not run: the sandbox was lost, and stderr says how; a call made while the
// engine is down is sandbox_unavailable; removals that failed meanwhile
// are retried; calls work again when it is back.
func TestFaultEngineRestart(t *testing.T) {
	e := testenv.Private(t, image())
	p := startProc(t, []string{"DOCKER_HOST=" + e.Host, "PYBOX_RECONCILE_INTERVAL=2s"})
	t.Cleanup(func() { e.Start() })
	running := p.callAsync(map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(60)", "timeout": 60})
	waitFor(t, "the call's container", 60*time.Second, func() bool { return len(containersAt(t, e.Host, p.ownerPrefix())) == 1 })
	time.Sleep(time.Second)
	stopped := time.Now()
	e.Stop()
	t.Logf("the engine stopped in %v", time.Since(stopped).Round(time.Millisecond))
	a := <-running
	sc := a.Result.StructuredContent
	stderr, _ := sc["stderr"].(string)
	checkFour(t, "the call in flight", sc)
	if sc["error"] != "sandbox_lost" || a.Result.IsError || sc["stdout"] != "started\n" || !strings.Contains(stderr, "pybox: the") || strings.Contains(stderr, "did not run") {
		t.Errorf("the call the restart cut: %v; want sandbox_lost, not isError, what it printed, a note", sc)
	}
	if a.took > 30*time.Second {
		t.Errorf("the call the restart cut answered after %v", a.took)
	}
	down := p.runPython(map[string]any{"code": "print(1)", "timeout": 10}, 30*time.Second)
	if down.Result.StructuredContent["error"] != "sandbox_unavailable" || !down.Result.IsError {
		t.Errorf("a call with the engine down: %v; want sandbox_unavailable", down.Result.StructuredContent)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "nothing left once the engine is back", 60*time.Second, func() bool { return len(containersAt(t, e.Host, p.ownerPrefix())) == 0 })
	if a := p.runPython(map[string]any{"code": "print(1)"}, 60*time.Second); a.Result.StructuredContent["stdout"] != "1\n" {
		t.Errorf("after the engine came back: %v", a.Result.StructuredContent)
	}
	t.Logf("the cut call answered after %v: %s", a.took.Round(time.Millisecond), stderr)
}

// TestFaultContainerKilledAndPaused: a sandbox killed or paused from
// outside gets sandbox_lost and a note, the paused one at its timeout plus
// at most 2 s; nothing is left.
func TestFaultContainerKilledAndPaused(t *testing.T) {
	testenv.Engine(t, image())
	for _, how := range []string{"kill", "pause"} {
		t.Run(how, func(t *testing.T) {
			p := startProc(t, nil)
			ch := p.callAsync(map[string]any{"code": "import time\nprint('up', flush=True)\ntime.sleep(60)", "timeout": 6})
			var id string
			waitFor(t, "the call's container", 60*time.Second, func() bool {
				if ids := containerIDs(t, p.ownerPrefix()); len(ids) == 1 {
					id = ids[0]
				}
				return id != ""
			})
			time.Sleep(time.Second)
			if out, err := exec.Command("docker", how, id).CombinedOutput(); err != nil {
				t.Fatalf("docker %s: %v %s", how, err, out)
			}
			a := <-ch
			sc := a.Result.StructuredContent
			checkFour(t, how, sc)
			want := map[string]string{"kill": "killed from outside pybox", "pause": "paused from outside pybox"}[how]
			stderr, _ := sc["stderr"].(string)
			if sc["error"] != "sandbox_lost" || sc["stdout"] != "up\n" || !strings.Contains(stderr, want) || a.took > 6*time.Second+2500*time.Millisecond {
				t.Errorf("%s: %v after %v; want sandbox_lost, %q, within the timeout and 2 s", how, sc, a.took, want)
			}
			waitFor(t, "nothing left", 30*time.Second, func() bool { return len(containersOf(t, p.ownerPrefix())) == 0 })
		})
	}
}

// containerIDs lists the full ids of the labelled containers of an owner.
func containerIDs(t *testing.T, prefix string) []string {
	var ids []string
	for _, c := range containersOf(t, prefix) {
		ids = append(ids, c[:12])
	}
	return ids
}

// rss is a process's resident memory, in MiB.
func rss(t *testing.T, pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			kb, _ := strconv.Atoi(strings.Fields(l)[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

// TestFaultOversizedBodies: every HTTP endpoint refuses a body over the
// limit, before reading it when its length is declared, and keeps serving.
func TestFaultOversizedBodies(t *testing.T) {
	testenv.Engine(t, image())
	for _, tc := range []struct{ transport, path string }{{"http", "/mcp"}, {"sse", "/message"}, {"sse", "/sse"}} {
		t.Run(tc.transport+tc.path, func(t *testing.T) {
			s := startServer(t, "--transport", tc.transport)
			// A declared GiB: refused at once, without a byte of body sent.
			conn, err := net.Dial("tcp", s.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			start := time.Now()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", tc.path, s.addr, 1<<30)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer to a declared 1 GiB body: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(body, []byte("max-request-bytes")) || time.Since(start) > 2*time.Second {
				t.Errorf("a declared 1 GiB body: %d %s after %v; want 413 saying the limit, at once", resp.StatusCode, body, time.Since(start))
			}
			// 40 MB of unknown length: cut at the limit.
			r, w := io.Pipe()
			go func() {
				chunk := bytes.Repeat([]byte("x"), 1<<20)
				w.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"`))
				for range 40 {
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
				w.Close()
			}()
			req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+tc.path, r)
			req.Header.Set("Content-Type", "application/json")
			hc := &http.Client{Timeout: 30 * time.Second}
			if resp, err := hc.Do(req); err == nil {
				if resp.StatusCode < 400 {
					t.Errorf("40 MB of unknown length: status %d; want an error", resp.StatusCode)
				}
				resp.Body.Close()
			}
			if m := rss(t, s.cmd.Process.Pid, "VmHWM"); m > 100 {
				t.Errorf("the server's peak RSS is %.0f MiB after oversized bodies; want under 100", m)
			}
		})
	}
}

// TestFaultMemoryAfterBurst: after a burst of twenty 20 MB calls (refused)
// and twenty of the largest valid ones (run), an idle server is back under
// 100 MiB of resident memory within 60 s.
func TestFaultMemoryAfterBurst(t *testing.T) {
	testenv.Engine(t, image())
	s := startServer(t, "--transport", "http", "--max-queue", "64")
	file := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("0123456789abcdef"), (10<<20)/16))
	post := func(body []byte) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/mcp", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	big := bytes.Repeat([]byte("y"), 20<<20)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := post(big)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[http.StatusRequestEntityTooLarge] != 20 {
		t.Errorf("twenty 20 MB bodies: statuses %v; want twenty 413", codes)
	}
	// The largest valid calls, each on a connection of its own (stateless
	// requests of the 2025-03-26 protocol).
	ok := 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, isErr, err := callHTTP(s.addr, map[string]any{"code": "import os\nprint(os.path.getsize('/mnt/user-data/d.bin'))", "timeout": 120,
				"files": []map[string]any{{"path": "d.bin", "content": file, "encoding": "base64"}}})
			mu.Lock()
			if err == nil && !isErr && out["stdout"] == "10485760\n" {
				ok++
			} else {
				t.Logf("a 10 MiB call: %v %v %v", err, isErr, out)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ok != 20 {
		t.Errorf("%d of twenty 10 MiB calls ran; want all", ok)
	}
	peak := rss(t, s.cmd.Process.Pid, "VmHWM")
	deadline := time.Now().Add(60 * time.Second)
	var now float64
	for time.Now().Before(deadline) {
		if now = rss(t, s.cmd.Process.Pid, "VmRSS"); now < 100 {
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("server RSS: peak %.0f MiB during the burst, %.0f MiB idle after it", peak, now)
	if now >= 100 {
		t.Errorf("an idle server 60 s after the burst holds %.0f MiB; want under 100", now)
	}
	// The burst grew the pool (a call that finds it empty raises its size,
	// up to 4 x --pool); without calls it falls back to its one sandbox,
	// and nothing else is left.
	waitFor(t, "the pool to shrink back to its size, nothing else left", 90*time.Second, func() bool {
		return len(containersOf(t, ownerOf(s.cmd))) <= 1
	})
}

// callHTTP makes one call through a new Streamable HTTP connection,
// without failing the test from another goroutine.
func callHTTP(addr string, args map[string]any) (map[string]any, bool, error) {
	c, err := mcpclient.NewStreamableHttpClient("http://" + addr + "/mcp")
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return nil, false, err
	}
	if _, err := c.Initialize(ctx, mcpInit()); err != nil {
		return nil, false, err
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "run_python"
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return nil, false, err
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	return out, res.IsError, nil
}

// ownerOf is the owner label prefix of a server process's containers.
func ownerOf(cmd *exec.Cmd) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/", host, cmd.Process.Pid)
}
