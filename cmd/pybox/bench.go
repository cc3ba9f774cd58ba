package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
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

// benchSnippets are the calls whose latency the benchmark reports.
var benchSnippets = []struct{ name, code string }{
	{"print(1)", "print(1)"},
	{"pandas snippet", "import pandas as pd\ndf = pd.DataFrame({'a': range(1000), 'b': range(1000)})\nprint(df.describe().loc['mean'].sum())"},
	{"matplotlib snippet", "import matplotlib.pyplot as plt\nfig = plt.figure()\nplt.plot([1, 3, 2])\nfig.savefig('/tmp/chart.png')\nplt.close(fig)\nprint('ok')"},
}

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg config
	fs := flagSet("bench", false, &cfg)
	runs := fs.Int("runs", 20, "calls per snippet and mode, for the latency percentiles")
	poolSize := fs.Int("pool-size", 4, "the pool's size in the pool-on mode")
	levels := fs.String("concurrency", "1,4,16", "concurrency levels for the throughput runs")
	calls := fs.Int("calls", 32, "calls per concurrency level")
	head := "Usage: pybox bench [flags]\n\nRuns, in one process, pool off against pool on: p50 and p95 latency of a call through MCP for print(1), a pandas snippet and a matplotlib snippet, executions per second at each concurrency level, and the server's memory. Prints a Markdown table."
	if done, code := parseCommand(fs, args, stdout, stderr, head, &cfg); done {
		return code
	}
	var conc []int
	for _, l := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || n <= 0 {
			fmt.Fprintf(stderr, "pybox bench: --concurrency %q\n", *levels)
			return 2
		}
		conc = append(conc, n)
	}
	type row struct {
		mode       string
		p50, p95   []time.Duration
		throughput []float64
		rssMiB     float64
	}
	var rows []row
	for _, pool := range []int{0, *poolSize} {
		mode := "pool off"
		if pool > 0 {
			mode = fmt.Sprintf("pool on (%d)", pool)
		}
		opt := cfg.sandboxOptions(nil)
		opt.PoolSize = pool
		opt.MaxConcurrent = slices.Max(conc)
		sb, err := sandbox.New(opt, nopLog())
		if err != nil {
			fmt.Fprintln(stderr, "pybox bench:", err)
			return 1
		}
		srv := server.New(server.Options{Runner: sb, DefaultTimeout: 60 * time.Second})
		c, err := client.NewInProcessClient(srv.MCP())
		if err == nil {
			err = c.Start(ctx)
		}
		if err == nil {
			init := mcp.InitializeRequest{}
			init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
			init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
			_, err = c.Initialize(ctx, init)
		}
		if err != nil {
			fmt.Fprintln(stderr, "pybox bench:", err)
			return 1
		}
		waitPool := func() {
			for deadline := time.Now().Add(60 * time.Second); pool > 0 && sb.PoolReady() < pool && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
		}
		r := row{mode: mode}
		for _, sn := range benchSnippets {
			var lat []time.Duration
			for i := 0; i <= *runs; i++ {
				waitPool() // a model's calls come seconds apart: the pool is full
				start := time.Now()
				if err := benchCall(ctx, c, sn.code); err != nil {
					fmt.Fprintf(stderr, "pybox bench: %s: %v\n", sn.name, err)
					return 1
				}
				if i > 0 { // the first call warms the engine's caches
					lat = append(lat, time.Since(start))
				}
			}
			slices.Sort(lat)
			r.p50 = append(r.p50, lat[len(lat)/2])
			r.p95 = append(r.p95, lat[min(len(lat)-1, len(lat)*95/100)])
			fmt.Fprintf(stderr, "pybox bench: %s, %s: p50 %v\n", mode, sn.name, lat[len(lat)/2].Round(time.Millisecond))
		}
		for _, n := range conc {
			waitPool()
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed error
			next := make(chan struct{}, *calls)
			for range *calls {
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
			if failed != nil {
				fmt.Fprintln(stderr, "pybox bench: throughput:", failed)
				return 1
			}
			r.throughput = append(r.throughput, float64(*calls)/time.Since(start).Seconds())
		}
		r.rssMiB = rssMiB()
		c.Close()
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		srv.Close(cctx)
		sb.Close(cctx)
		cancel()
		rows = append(rows, r)
	}

	fmt.Fprintf(stdout, "| mode |")
	for _, sn := range benchSnippets {
		fmt.Fprintf(stdout, " %s p50 | %s p95 |", sn.name, sn.name)
	}
	for _, n := range conc {
		fmt.Fprintf(stdout, " exec/s at %d |", n)
	}
	fmt.Fprintln(stdout, " server RSS |")
	fmt.Fprint(stdout, "|---|"+strings.Repeat("---|", 2*len(benchSnippets)+len(conc)+1)+"\n")
	for _, r := range rows {
		fmt.Fprintf(stdout, "| %s |", r.mode)
		for i := range benchSnippets {
			fmt.Fprintf(stdout, " %d ms | %d ms |", r.p50[i].Milliseconds(), r.p95[i].Milliseconds())
		}
		for _, t := range r.throughput {
			fmt.Fprintf(stdout, " %.1f |", t)
		}
		fmt.Fprintf(stdout, " %.0f MiB |\n", r.rssMiB)
	}
	return 0
}

func benchCall(ctx context.Context, c *client.Client, code string) error {
	req := mcp.CallToolRequest{}
	req.Params.Name = server.ToolName
	req.Params.Arguments = map[string]any{"code": code}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("the call failed: %v", res.StructuredContent)
	}
	var out server.Output
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		return err
	}
	if out.ExitCode != 0 {
		return fmt.Errorf("exit %d: %s", out.ExitCode, out.Stderr)
	}
	return nil
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

func nopLog() zerolog.Logger { return zerolog.Nop() }
