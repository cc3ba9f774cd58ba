package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pybox/pybox/sandbox"
)

// loadResult is what a load run measured.
type loadResult struct {
	calls, concurrency, correct int
	kinds                       map[string]int // error kinds, and "wrong" for a wrong answer
	latency                     []time.Duration
	took                        time.Duration
	peakRSS                     float64 // MiB
	left                        int     // containers of the server left after it stopped
}

func benchLoad(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg config
	var calls, conc, pool int
	if done, code := benchFlags("load", args, stdout, stderr, &cfg, func(fs *flag.FlagSet) {
		fs.IntVar(&calls, "calls", 1000, "calls in all")
		fs.IntVar(&conc, "concurrency", 32, "clients calling at once, each on a connection of its own")
		fs.IntVar(&pool, "pool", 2, "the server's --pool")
	}); done {
		return code
	}
	r, err := runLoad(ctx, cfg, calls, conc, pool, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "pybox bench load:", err)
		return 1
	}
	printLoad(stdout, r)
	if r.correct != r.calls || r.left != 0 {
		return 1
	}
	return 0
}

// runLoad starts `pybox serve --transport http`, drives the calls, stops
// the server and counts what it left.
func runLoad(ctx context.Context, cfg config, calls, conc, pool int, stderr io.Writer) (loadResult, error) {
	r := loadResult{calls: calls, concurrency: conc, kinds: map[string]int{}}
	srv, err := startServe(ctx, stderr, "--image", cfg.image, "--runtime", cfg.runtime, "--pool", fmt.Sprint(pool),
		"--max-concurrent", fmt.Sprint(cfg.maxConcurrent), "--max-queue", fmt.Sprint(max(cfg.maxQueue, conc)))
	if err != nil {
		return r, err
	}
	defer srv.kill()
	addr := srv.addr

	jobs := make(chan int, calls)
	for i := range calls {
		jobs <- i
	}
	close(jobs)
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := loadClient(ctx, addr)
			for i := range jobs {
				kind, d := "", time.Duration(0)
				if err == nil {
					kind, d = loadCall(ctx, c, i)
				} else {
					kind = "connect: " + err.Error()
				}
				mu.Lock()
				if kind == "" {
					r.correct++
					r.latency = append(r.latency, d)
				} else {
					r.kinds[kind]++
				}
				mu.Unlock()
			}
			if c != nil {
				c.Close()
			}
		}()
	}
	wg.Wait()
	r.took = time.Since(start)
	r.peakRSS = procMiB(srv.cmd.Process.Pid, "VmHWM")

	srv.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-srv.exited:
	case <-time.After(60 * time.Second):
		return r, fmt.Errorf("the server did not stop within 60 s of SIGTERM")
	}
	host, _ := os.Hostname()
	r.left, err = containersOwnedBy(fmt.Sprintf("%s/%d/", host, srv.cmd.Process.Pid))
	return r, err
}

// serveProcess is a `pybox serve --transport http` the benchmarks start.
type serveProcess struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
}

// startServe starts this binary as `pybox serve --transport http` on a
// free loopback port with args, logging warnings to stderr, and waits
// until it listens.
func startServe(ctx context.Context, stderr io.Writer, args ...string) (*serveProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &serveProcess{addr: ln.Addr().String(), exited: make(chan struct{})}
	ln.Close()
	p.cmd = exec.CommandContext(ctx, self, append([]string{"serve", "--transport", "http", "--addr", p.addr, "--log-level", "warn"}, args...)...)
	p.cmd.Stderr = stderr
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", p.addr); err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("the server did not listen on %s", p.addr)
		}
	}
}

// stop ends the server with SIGTERM, or kills it after 30 s.
func (p *serveProcess) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.kill()
	}
}

func (p *serveProcess) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

func loadClient(ctx context.Context, addr string) (*mcpclient.Client, error) {
	c, err := mcpclient.NewStreamableHttpClient("http://" + addr + "/mcp")
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = "2025-06-18"
	init.Params.ClientInfo = mcp.Implementation{Name: "pybox-bench-load", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// loadCall makes call i, which prints a nonce of its own, and says what
// went wrong ("" for a correct answer) and how long it took.
func loadCall(ctx context.Context, c *mcpclient.Client, i int) (string, time.Duration) {
	nonce := fmt.Sprintf("%d-%s", i, sandbox.NewID()[:8])
	req := mcp.CallToolRequest{}
	req.Params.Name = "run_python"
	req.Params.Arguments = map[string]any{"code": fmt.Sprintf("print(%q)", nonce)}
	start := time.Now()
	res, err := c.CallTool(ctx, req)
	took := time.Since(start)
	if err != nil {
		return "transport: " + err.Error(), took
	}
	var out struct {
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
		Error    string `json:"error"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	switch {
	case out.Error != "":
		return out.Error, took
	case out.Stdout != nonce+"\n" || out.ExitCode != 0:
		return "wrong", took
	}
	return "", took
}

// containersOwnedBy counts the labelled containers whose owner label
// starts with prefix, with the engine's CLI.
func containersOwnedBy(prefix string) (int, error) {
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label="+sandbox.LabelManaged+"=true", "--format", `{{.Label "`+sandbox.LabelOwner+`"}}`).Output()
	if err != nil {
		return 0, fmt.Errorf("listing containers: %w", err)
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n, nil
}

// procMiB reads a field of a process's status, in MiB.
func procMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			var kb float64
			fmt.Sscan(strings.Fields(l)[1], &kb)
			return kb / 1024
		}
	}
	return 0
}

func printLoad(w io.Writer, r loadResult) {
	slices.Sort(r.latency)
	pct := func(p int) string {
		if len(r.latency) == 0 {
			return "-"
		}
		return fmt.Sprintf("%d ms", r.latency[min(len(r.latency)-1, len(r.latency)*p/100)].Milliseconds())
	}
	kinds := "none"
	if len(r.kinds) > 0 {
		var ks []string
		for k, n := range r.kinds {
			ks = append(ks, fmt.Sprintf("%s: %d", k, n))
		}
		sort.Strings(ks)
		kinds = strings.Join(ks, ", ")
	}
	fmt.Fprintln(w, "| calls | concurrency | correct answers | errors | p50 | p95 | p99 | calls/s | server peak RSS | containers left |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	fmt.Fprintf(w, "| %d | %d | %d | %s | %s | %s | %s | %.1f | %.0f MiB | %d |\n", r.calls, r.concurrency, r.correct, kinds,
		pct(50), pct(95), pct(99), float64(r.calls)/r.took.Seconds(), r.peakRSS, r.left)
}
