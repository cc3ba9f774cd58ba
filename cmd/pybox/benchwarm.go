package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/rs/zerolog"

	"github.com/pybox/pybox/sandbox"
	"github.com/pybox/pybox/server"
)

// The warm benchmark: a model's pace (a pause between calls), and calls
// back to back, through MCP over a stdio transport, with the breakdown of
// each call's time from the server's own clocks.

const pandasSnippet = "import pandas as pd\ndf = pd.DataFrame({'a': range(1000), 'b': range(1000)})\nprint(df.describe().loc['mean'].sum())"

// warmSeries is one line of the warm table: calls at one pace.
type warmSeries struct {
	name  string
	pause time.Duration
	code  string
	where string // "pool" or "session"
	calls []warmCall
}

// warmCall is one call as the client saw it, with the server's timing.
type warmCall struct {
	total time.Duration
	t     server.Timing
}

func benchWarm(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg config
	var runs, b2b int
	var runtimes, pauses string
	if done, code := benchFlags("warm", args, stdout, stderr, &cfg, func(fs *flag.FlagSet) {
		fs.IntVar(&runs, "runs", 10, "calls per snippet at each pause")
		fs.IntVar(&b2b, "back-to-back", 20, "calls per snippet back to back (and naive docker runs)")
		fs.StringVar(&runtimes, "runtimes", "", "runtimes to compare (default: runc, and runsc where the engine has it)")
		fs.StringVar(&pauses, "pauses", "3s,1s", "the pauses between calls, as a model makes them")
		fs.IntVar(&cfg.pool, "pool", 2, "the pool's size, as pybox serve's --pool")
		fs.IntVar(&cfg.poolMax, "pool-max", 0, "the pool's cap, as pybox serve's --pool-max")
		fs.IntVar(&cfg.poolParallel, "pool-parallel", 0, "as pybox serve's --pool-parallel")
	}); done {
		return code
	}
	var ps []time.Duration
	for _, p := range strings.Split(pauses, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil || d <= 0 {
			fmt.Fprintf(stderr, "pybox bench: --pauses %q\n", pauses)
			return 2
		}
		ps = append(ps, d)
	}
	rts, err := benchRuntimes(ctx, runtimes)
	if err != nil {
		fmt.Fprintln(stderr, "pybox bench:", err)
		return 1
	}
	results := map[string][]*warmSeries{}
	naive := map[string]time.Duration{}
	for _, rt := range rts {
		opt := cfg.sandboxOptions(nil)
		opt.Runtime = rt
		if rt == "runc" {
			opt.Runtime = ""
		}
		fmt.Fprintf(stderr, "bench warm: %s\n", rt)
		series, err := warmRuntime(ctx, opt, ps, runs, b2b, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "pybox bench: %s: %v\n", rt, err)
			return 1
		}
		results[rt] = series
		if naive[rt], err = naiveRuns(ctx, cfg, rt, b2b); err != nil {
			fmt.Fprintf(stderr, "pybox bench: %s: %v\n", rt, err)
			return 1
		}
	}
	printWarm(stdout, rts, results, naive, cfg.pool)
	return 0
}

// warmRuntime runs every series under one runtime, against one server.
func warmRuntime(ctx context.Context, opt sandbox.Options, pauses []time.Duration, runs, b2b int, stderr io.Writer) ([]*warmSeries, error) {
	sb, err := sandbox.New(opt, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var last server.Timing
	srv := server.New(server.Options{Runner: sb, DefaultTimeout: 60 * time.Second, OnCall: func(c server.Call) {
		t := c.Timing
		mu.Lock()
		last = t
		mu.Unlock()
	}})
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		srv.Close(cctx)
		sb.Close(cctx)
		cancel()
	}()
	c, stop, err := stdioClient(ctx, srv)
	if err != nil {
		return nil, err
	}
	defer stop()
	call := func(code, session string) (warmCall, string, error) {
		start := time.Now()
		out, err := benchCallOut(ctx, c, code, session)
		total := time.Since(start)
		mu.Lock()
		t := last
		mu.Unlock()
		return warmCall{total: total, t: t}, out.SessionID, err
	}
	_, sid, err := call("x = 1", "new")
	if err != nil {
		return nil, fmt.Errorf("starting a session: %w", err)
	}
	if _, _, err := call(pandasSnippet, sid); err != nil {
		return nil, fmt.Errorf("warming the session: %w", err)
	}
	fill := func() {
		for deadline := time.Now().Add(2 * time.Minute); sb.PoolReady() < opt.PoolSize && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	}
	var all []*warmSeries
	for _, p := range pauses {
		s := []*warmSeries{
			{name: "print(1)", pause: p, code: "print(1)", where: "pool"},
			{name: "pandas snippet", pause: p, code: pandasSnippet, where: "pool"},
			{name: "print(1)", pause: p, code: "print(1)", where: "session"},
			// The snippet's own floor: in a session that has run it before.
			{name: "pandas snippet", pause: p, code: pandasSnippet, where: "session"},
		}
		fill()
		fmt.Fprintf(stderr, "bench warm: %d rounds with a %s pause\n", runs, p)
		// Interleaved, so that each series meets the same conditions: a
		// pause, then a call (the session's first, which leaves the pool
		// alone), then a pause before each of the pandas snippet's calls.
		// Each round: a pause before the print(1) pair and before each
		// pandas call.
		rounds := [][]int{{2, 0}, {1}, {3}}
		for range runs {
			for _, group := range rounds {
				time.Sleep(p)
				for _, i := range group {
					sess := ""
					if s[i].where == "session" {
						sess = sid
					}
					wc, _, err := call(s[i].code, sess)
					if err != nil {
						return nil, err
					}
					s[i].calls = append(s[i].calls, wc)
				}
			}
		}
		all = append(all, s...)
	}
	for _, sn := range []struct{ name, code string }{{"print(1)", "print(1)"}, {"pandas snippet", pandasSnippet}} {
		fill()
		fmt.Fprintf(stderr, "bench warm: %d %s back to back\n", b2b, sn.name)
		s := &warmSeries{name: sn.name, code: sn.code, where: "pool"}
		for range b2b {
			wc, _, err := call(sn.code, "")
			if err != nil {
				return nil, err
			}
			s.calls = append(s.calls, wc)
		}
		all = append(all, s)
	}
	return all, nil
}

// stdioClient connects an MCP client to srv over a stdio transport in this
// process: the JSON-RPC messages are encoded, framed and decoded as over a
// real pipe, with the server's clocks at hand.
func stdioClient(ctx context.Context, srv *server.Server) (*client.Client, func(), error) {
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		mcpserver.NewStdioServer(srv.MCP()).Listen(sctx, toServer, fromServer)
	}()
	c := client.NewClient(transport.NewIO(toClient, fromClient, nil))
	stop := func() {
		c.Close()
		cancel()
		toServer.Close()
		fromServer.Close()
		<-done
	}
	if err := startBenchClient(ctx, c); err != nil {
		stop()
		return nil, nil, err
	}
	return c, stop, nil
}

// benchCallOut makes one call and checks that the code ran cleanly.
func benchCallOut(ctx context.Context, c *client.Client, code, session string) (server.Output, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = server.ToolName
	req.Params.Arguments = map[string]any{"code": code}
	if session != "" {
		req.Params.Arguments = map[string]any{"code": code, "session_id": session}
	}
	var out server.Output
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return out, err
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		return out, err
	}
	if res.IsError || out.ExitCode != 0 {
		return out, fmt.Errorf("the call failed: exit %d, error %q: %s", out.ExitCode, out.Error, out.Stderr)
	}
	return out, nil
}

// naiveRuns is the p50 of a plain `docker run` per call of print(1), with
// the sandbox's walls as docker run flags: what pybox is to beat.
func naiveRuns(ctx context.Context, cfg config, runtime string, n int) (time.Duration, error) {
	var ts []time.Duration
	for i := 0; i <= n; i++ {
		cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "-i", "--runtime", runtime, "--network", "none",
			"--read-only", "--tmpfs", "/tmp", "--memory", "256m", "--memory-swap", "256m", "--cpus", "1", "--pids-limit", "64",
			"--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--user", "65534:65534", "--log-driver", "none",
			cfg.image, "python3", "-c", "print(1)")
		start := time.Now()
		out, err := cmd.Output()
		took := time.Since(start)
		if err != nil || strings.TrimSpace(string(out)) != "1" {
			return 0, fmt.Errorf("docker run: %v (printed %q)", err, out)
		}
		if i > 0 { // the first warms the engine's caches
			ts = append(ts, took)
		}
	}
	return p50(ts), nil
}

func p50(ts []time.Duration) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	s := slices.Clone(ts)
	slices.Sort(s)
	return s[len(s)/2]
}

// p50Of is the median of one measure of the calls.
func p50Of(calls []warmCall, f func(warmCall) time.Duration) time.Duration {
	ts := make([]time.Duration, len(calls))
	for i, c := range calls {
		ts[i] = f(c)
	}
	return p50(ts)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}

// The breakdown's rows: each a part of a call's time, as p50 over the calls.
var breakdownRows = []struct {
	name string
	f    func(warmCall) time.Duration
}{
	{"transport and JSON-RPC (client to server and back)", func(c warmCall) time.Duration { return max(0, c.total-c.t.Handler) }},
	{"argument decode", func(c warmCall) time.Duration { return c.t.Decode }},
	{"queue (a slot)", func(c warmCall) time.Duration { return c.t.Sandbox.Queue }},
	{"sandbox handoff (take or start one)", func(c warmCall) time.Duration { return c.t.Sandbox.Acquire }},
	{"attach stream, both ways", func(c warmCall) time.Duration { return c.t.Sandbox.Transit }},
	{"runner: input files", func(c warmCall) time.Duration { return c.t.Sandbox.Setup }},
	{"code run", func(c warmCall) time.Duration { return c.t.Sandbox.Run }},
	{"runner: end of call (leftovers, drain, files)", func(c warmCall) time.Duration { return c.t.Sandbox.Finish }},
	{"output collection", func(c warmCall) time.Duration { return c.t.Sandbox.Collect }},
	{"redaction", func(c warmCall) time.Duration { return c.t.Sandbox.Redact }},
	{"result encode", func(c warmCall) time.Duration { return c.t.Encode }},
	{"total, at the client", func(c warmCall) time.Duration { return c.total }},
}

func printWarm(w io.Writer, rts []string, results map[string][]*warmSeries, naive map[string]time.Duration, pool int) {
	fmt.Fprintf(w, "Warm calls through MCP over stdio (in-process pipes), pool %d; p50 of each series, all in one run.\n\n", pool)
	fmt.Fprintln(w, "| runtime | pause | call | p50 | p95 | sandbox |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, rt := range rts {
		for _, s := range results[rt] {
			pause := "none (back to back)"
			if s.pause > 0 {
				pause = s.pause.String()
			}
			ts := make([]time.Duration, len(s.calls))
			for i, c := range s.calls {
				ts[i] = c.total
			}
			slices.Sort(ts)
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", rt, pause, s.name, ms(ts[len(ts)/2]), ms(ts[len(ts)*95/100]), sources(s.calls))
		}
		fmt.Fprintf(w, "| %s | none (back to back) | naive `docker run` of print(1) | %s | | |\n", rt, ms(naive[rt]))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The acceptance ratios (lower is better; each from one run):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| ratio | "+strings.Join(rts, " | ")+" | target |")
	fmt.Fprintln(w, "|---|"+strings.Repeat("---|", len(rts))+"---|")
	find := func(rt, name, where string, pause time.Duration) []warmCall {
		for _, s := range results[rt] {
			if s.name == name && s.where == where && s.pause == pause {
				return s.calls
			}
		}
		return nil
	}
	total := func(c warmCall) time.Duration { return c.total }
	row := func(name, target string, f func(rt string) string) {
		cells := make([]string, len(rts))
		for i, rt := range rts {
			cells[i] = f(rt)
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", name, strings.Join(cells, " | "), target)
	}
	row("pooled print(1) / session print(1), 3 s pause", "at most 3x", func(rt string) string {
		return ratio(p50Of(find(rt, "print(1)", "pool", 3*time.Second), total), p50Of(find(rt, "print(1)", "session", 3*time.Second), total))
	})
	if slices.Contains(rts, "runsc") && slices.Contains(rts, "runc") {
		fmt.Fprintf(w, "| pooled print(1), runsc / runc, 3 s pause | %s | at most 2x |\n", ratio(p50Of(find("runsc", "print(1)", "pool", 3*time.Second), total), p50Of(find("runc", "print(1)", "pool", 3*time.Second), total)))
	}
	row("pandas snippet / print(1), 1 s pause", "at most 2x", func(rt string) string {
		return ratio(p50Of(find(rt, "pandas snippet", "pool", time.Second), total), p50Of(find(rt, "print(1)", "pool", time.Second), total))
	})
	row("pooled pandas snippet / the same in a session, 1 s pause (not a target: the snippet's own floor)", "", func(rt string) string {
		return ratio(p50Of(find(rt, "pandas snippet", "pool", time.Second), total), p50Of(find(rt, "pandas snippet", "session", time.Second), total))
	})
	row("back-to-back print(1) / naive runc `docker run`", "runc at most 0.67x, runsc at most 1x", func(rt string) string {
		return ratio(p50Of(find(rt, "print(1)", "pool", 0), total), naive["runc"])
	})
	fmt.Fprintln(w)
	// The breakdown is taken at the longest pause measured: the pool's
	// sandboxes are back, so it shows a warm call's own parts.
	var pause time.Duration
	for _, rt := range rts {
		for _, s := range results[rt] {
			pause = max(pause, s.pause)
		}
	}
	for _, rt := range rts {
		fmt.Fprintf(w, "Where a warm call's time goes under %s (p50 of each part over the calls, %s pause; the parts' p50s need not add up to the total's):\n\n", rt, pause)
		cols := [][]warmCall{find(rt, "print(1)", "pool", pause), find(rt, "print(1)", "session", pause), find(rt, "pandas snippet", "pool", pause), find(rt, "pandas snippet", "session", pause)}
		fmt.Fprintln(w, "| part | pooled print(1) | session print(1) | pooled pandas snippet | session pandas snippet |")
		fmt.Fprintln(w, "|---|---|---|---|---|")
		for _, r := range breakdownRows {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.name, ms(p50Of(cols[0], r.f)), ms(p50Of(cols[1], r.f)), ms(p50Of(cols[2], r.f)), ms(p50Of(cols[3], r.f)))
		}
		fmt.Fprintln(w)
	}
}

// sources says where a series' sandboxes came from, when not all alike.
func sources(calls []warmCall) string {
	n := map[sandbox.Source]int{}
	light := 0
	for _, c := range calls {
		n[c.t.Sandbox.Source]++
		if c.t.Sandbox.Light {
			light++
		}
	}
	var parts []string
	for _, s := range []sandbox.Source{sandbox.SourcePool, sandbox.SourceCold, sandbox.SourceSession} {
		if n[s] > 0 {
			part := fmt.Sprintf("%s %d", s, n[s])
			if s == sandbox.SourcePool && light > 0 {
				part += fmt.Sprintf(" (%d light)", light)
			}
			parts = append(parts, part)
		}
	}
	return strings.Join(parts, ", ")
}
