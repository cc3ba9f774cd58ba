package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/rs/zerolog"

	"github.com/pybox/pybox/sandbox"
	"github.com/pybox/pybox/server"
)

const benchUsage = `Usage: pybox bench [latency|warm|output|load|redact] [flags]

  latency  (the default) pool off against pool on, in one process: p50 and p95
           latency of a call through MCP for print(1), a pandas snippet and a
           matplotlib snippet, executions per second at each concurrency level,
           and the server's memory
  warm     warm calls at a model's pace (--pauses between calls) and back to
           back, through MCP over stdio: pooled against session calls, a
           pandas snippet against print(1), against a naive ` + "`docker run`" + `
           per call, under each runtime; and where each call's time goes
  output   the time to print --lines lines through pybox, cold and pooled,
           against a plain ` + "`docker run`" + ` of the same code with the same
           image, under each runtime the engine has
  load     --calls calls at --concurrency through a real ` + "`pybox serve`" + ` over
           Streamable HTTP, each from a client of its own: correct answers,
           error kinds, latency percentiles, calls per second, the server's
           peak memory and the containers it left
  redact   MiB/s of the redactor on plain, credential-dense and base64 text,
           and the server CPU of a call that leaves 20 MiB of credential-dense
           files, against the call's timeout

Each prints a Markdown table on stdout.`

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	mode := "latency"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		mode, args = args[0], args[1:]
	}
	switch mode {
	case "latency":
		return benchLatency(ctx, args, stdout, stderr)
	case "warm":
		return benchWarm(ctx, args, stdout, stderr)
	case "output":
		return benchOutput(ctx, args, stdout, stderr)
	case "load":
		return benchLoad(ctx, args, stdout, stderr)
	case "redact":
		return benchRedact(ctx, args, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "pybox bench: unknown benchmark %q\n\n%s\n", mode, benchUsage)
		return 2
	}
}

// benchFlags parses a benchmark's flags with the sandbox's.
func benchFlags(name string, args []string, stdout, stderr io.Writer, cfg *config, add func(*flag.FlagSet)) (done bool, code int) {
	fs := flagSet("bench "+name, false, cfg)
	add(fs)
	return parseCommand(fs, args, stdout, stderr, benchUsage, cfg)
}

// benchSnippets are the calls whose latency the benchmark reports.
var benchSnippets = []struct{ name, code string }{
	{"print(1)", "print(1)"},
	{"pandas snippet", "import pandas as pd\ndf = pd.DataFrame({'a': range(1000), 'b': range(1000)})\nprint(df.describe().loc['mean'].sum())"},
	{"matplotlib snippet", "import matplotlib.pyplot as plt\nfig = plt.figure()\nplt.plot([1, 3, 2])\nfig.savefig('/tmp/chart.png')\nplt.close(fig)\nprint('ok')"},
}

// latencyRow is one mode's figures.
type latencyRow struct {
	mode       string
	p50, p95   []time.Duration
	throughput []float64
	rssMiB     float64
}

func benchLatency(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg config
	var runs, poolSize, calls int
	var levels string
	if done, code := benchFlags("latency", args, stdout, stderr, &cfg, func(fs *flag.FlagSet) {
		fs.IntVar(&runs, "runs", 20, "calls per snippet and mode, for the latency percentiles")
		fs.IntVar(&poolSize, "pool-size", 4, "the pool's size in the pool-on mode")
		fs.StringVar(&levels, "concurrency", "1,4,16", "concurrency levels for the throughput runs")
		fs.IntVar(&calls, "calls", 32, "calls per concurrency level")
	}); done {
		return code
	}
	var conc []int
	for _, l := range strings.Split(levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || n <= 0 {
			fmt.Fprintf(stderr, "pybox bench: --concurrency %q\n", levels)
			return 2
		}
		conc = append(conc, n)
	}
	var rows []latencyRow
	for _, pool := range []int{0, poolSize} {
		opt := cfg.sandboxOptions(nil)
		opt.PoolSize = pool
		opt.MaxConcurrent = slices.Max(conc)
		r, err := latencyMode(ctx, opt, runs, conc, calls, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "pybox bench:", err)
			return 1
		}
		rows = append(rows, r)
	}
	printLatency(stdout, rows, conc)
	return 0
}

// latencyMode measures one mode through an in-process MCP client.
func latencyMode(ctx context.Context, opt sandbox.Options, runs int, conc []int, calls int, stderr io.Writer) (latencyRow, error) {
	r := latencyRow{mode: "pool off"}
	if opt.PoolSize > 0 {
		r.mode = fmt.Sprintf("pool on (%d)", opt.PoolSize)
	}
	sb, err := sandbox.New(opt, zerolog.Nop())
	if err != nil {
		return r, err
	}
	srv := server.New(server.Options{Runner: sb, DefaultTimeout: 60 * time.Second})
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		srv.Close(cctx)
		sb.Close(cctx)
		cancel()
	}()
	c, err := inProcessClient(ctx, srv)
	if err != nil {
		return r, err
	}
	defer c.Close()
	waitPool := func() {
		for deadline := time.Now().Add(60 * time.Second); opt.PoolSize > 0 && sb.PoolReady() < opt.PoolSize && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, sn := range benchSnippets {
		var lat []time.Duration
		for i := 0; i <= runs; i++ {
			waitPool() // a model's calls come seconds apart: the pool is full
			start := time.Now()
			if err := benchCall(ctx, c, sn.code); err != nil {
				return r, fmt.Errorf("%s: %w", sn.name, err)
			}
			if i > 0 { // the first call warms the engine's caches
				lat = append(lat, time.Since(start))
			}
		}
		slices.Sort(lat)
		r.p50 = append(r.p50, lat[len(lat)/2])
		r.p95 = append(r.p95, lat[min(len(lat)-1, len(lat)*95/100)])
		fmt.Fprintf(stderr, "pybox bench: %s, %s: p50 %v\n", r.mode, sn.name, lat[len(lat)/2].Round(time.Millisecond))
	}
	for _, n := range conc {
		waitPool()
		perSec, err := throughput(ctx, c, n, calls)
		if err != nil {
			return r, fmt.Errorf("throughput: %w", err)
		}
		r.throughput = append(r.throughput, perSec)
	}
	r.rssMiB = rssMiB()
	return r, nil
}

// throughput runs calls print(1) calls n at a time and returns calls per second.
func throughput(ctx context.Context, c *client.Client, n, calls int) (float64, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	next := make(chan struct{}, calls)
	for range calls {
		next <- struct{}{}
	}
	close(next)
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				if err := benchCall(ctx, c, "print(1)"); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return float64(calls) / time.Since(start).Seconds(), failed
}

func printLatency(w io.Writer, rows []latencyRow, conc []int) {
	fmt.Fprintf(w, "| mode |")
	for _, sn := range benchSnippets {
		fmt.Fprintf(w, " %s p50 | %s p95 |", sn.name, sn.name)
	}
	for _, n := range conc {
		fmt.Fprintf(w, " exec/s at %d |", n)
	}
	fmt.Fprintln(w, " server RSS |")
	fmt.Fprint(w, "|---|"+strings.Repeat("---|", 2*len(benchSnippets)+len(conc)+1)+"\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s |", r.mode)
		for i := range benchSnippets {
			fmt.Fprintf(w, " %d ms | %d ms |", r.p50[i].Milliseconds(), r.p95[i].Milliseconds())
		}
		for _, t := range r.throughput {
			fmt.Fprintf(w, " %.1f |", t)
		}
		fmt.Fprintf(w, " %.0f MiB |\n", r.rssMiB)
	}
}

func inProcessClient(ctx context.Context, srv *server.Server) (*client.Client, error) {
	c, err := client.NewInProcessClient(srv.MCP())
	if err != nil {
		return nil, err
	}
	if err := startBenchClient(ctx, c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// startBenchClient starts an MCP client and initializes its session.
func startBenchClient(ctx context.Context, c *client.Client) error {
	if err := c.Start(ctx); err != nil {
		return err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
	_, err := c.Initialize(ctx, init)
	return err
}

func benchCall(ctx context.Context, c *client.Client, code string) error {
	_, err := benchCallOut(ctx, c, code, "")
	return err
}

// benchOutput times a flood of print lines through pybox and through a
// plain docker run of the same code, under each runtime.
func benchOutput(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg config
	var lines, runs int
	var runtimes string
	if done, code := benchFlags("output", args, stdout, stderr, &cfg, func(fs *flag.FlagSet) {
		fs.IntVar(&lines, "lines", 200000, "lines the code prints")
		fs.IntVar(&runs, "runs", 5, "runs of each, for the median")
		fs.StringVar(&runtimes, "runtimes", "", "runtimes to compare (default: runc, and runsc where the engine has it)")
	}); done {
		return code
	}
	code := fmt.Sprintf("for i in range(%d):\n    print('line', i)\n", lines)
	want := 0
	for i := range lines {
		want += len("line ") + len(strconv.Itoa(i)) + 1
	}
	rts, err := benchRuntimes(ctx, runtimes)
	if err != nil {
		fmt.Fprintln(stderr, "pybox bench:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%d lines (%.1f MB) printed by `for i in range(%d): print('line', i)`; median of %d runs, wall clock of the whole run. The ratios are against `docker run --log-driver none` (pybox runs sandboxes with the log driver off too); Docker's default json-file driver is beside it.\n\n", lines, float64(want)/1e6, lines, runs)
	fmt.Fprintln(stdout, "| runtime | docker run | docker run --log-driver none | pybox, cold | pybox, pooled | cold / docker run | pooled / docker run |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|")
	for _, rt := range rts {
		opt := cfg.sandboxOptions(nil)
		opt.Runtime = rt
		if rt == "runc" {
			opt.Runtime = ""
		}
		logged, err := medianOf(runs, func() (time.Duration, error) { return dockerRun(ctx, cfg.image, rt, "json-file", code, want) })
		var dr, cold, pooled time.Duration
		if err == nil {
			dr, err = medianOf(runs, func() (time.Duration, error) { return dockerRun(ctx, cfg.image, rt, "none", code, want) })
		}
		if err == nil {
			cold, err = pyboxRuns(ctx, opt, 0, runs, code, want)
		}
		if err == nil {
			pooled, err = pyboxRuns(ctx, opt, 1, runs, code, want)
		}
		if err == nil {
			fmt.Fprintf(stdout, "| %s | %d ms | %d ms | %d ms | %d ms | %.2fx | %.2fx |\n", rt, logged.Milliseconds(), dr.Milliseconds(), cold.Milliseconds(), pooled.Milliseconds(),
				float64(cold)/float64(dr), float64(pooled)/float64(dr))
			continue
		}
		fmt.Fprintf(stderr, "pybox bench: %s: %v\n", rt, err)
		return 1
	}
	return 0
}

// benchRuntimes is the list asked for, or runc and runsc where registered.
func benchRuntimes(ctx context.Context, list string) ([]string, error) {
	if list != "" {
		return strings.Split(list, ","), nil
	}
	sb, err := sandbox.New(sandbox.Options{}, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	defer sb.Close(ctx)
	info, err := sb.EngineInfo(ctx)
	if err != nil {
		return nil, err
	}
	rts := []string{"runc"}
	if slices.Contains(info.Runtimes, "runsc") {
		rts = append(rts, "runsc")
	}
	return rts, nil
}

// dockerRun runs the code with the docker CLI and reads all it prints.
func dockerRun(ctx context.Context, image, runtime, logDriver, code string, want int) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "--runtime", runtime, "--log-driver", logDriver, "--network", "none", image, "python3", "-c", code)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("docker run: %w", err)
	}
	took := time.Since(start)
	if out.Len() != want {
		return 0, fmt.Errorf("docker run printed %d bytes; want %d", out.Len(), want)
	}
	return took, nil
}

// pyboxRuns times runs calls through a sandbox with the given pool.
func pyboxRuns(ctx context.Context, opt sandbox.Options, pool, runs int, code string, want int) (time.Duration, error) {
	opt.PoolSize = pool
	sb, err := sandbox.New(opt, zerolog.Nop())
	if err != nil {
		return 0, err
	}
	defer sb.Close(context.WithoutCancel(ctx))
	return medianOf(runs, func() (time.Duration, error) {
		for deadline := time.Now().Add(time.Minute); pool > 0 && sb.PoolReady() < pool && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		start := time.Now()
		res := sb.Run(ctx, sandbox.Request{Code: code, Timeout: 2 * time.Minute})
		took := time.Since(start)
		if res.Error != sandbox.ErrNone || res.ExitCode != 0 || res.StdoutBytes != int64(want) {
			return 0, fmt.Errorf("pybox: error %q exit %d, %d bytes printed (want %d): %s", res.Error, res.ExitCode, res.StdoutBytes, want, res.Stderr)
		}
		return took, nil
	})
}

// medianOf runs f n times, after one run to warm caches, and returns the
// median time.
func medianOf(n int, f func() (time.Duration, error)) (time.Duration, error) {
	var ts []time.Duration
	for i := 0; i <= n; i++ {
		d, err := f()
		if err != nil {
			return 0, err
		}
		if i > 0 {
			ts = append(ts, d)
		}
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}

// rssMiB is this process's peak resident memory.
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			f := strings.Fields(l)
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}
