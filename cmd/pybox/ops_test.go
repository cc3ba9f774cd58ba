package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/pybox/pybox/internal/testenv"
	"github.com/pybox/pybox/sandbox"
	"github.com/pybox/pybox/server"
)

// prometheusBinary is Debian's prometheus (scripts/ensure-prometheus.sh
// installs it); under CI a missing one fails the test.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		if testenv.Required() {
			t.Fatal("no prometheus binary: run scripts/ensure-prometheus.sh (CI is set, so this fails instead of skipping)")
		}
		t.Skip("no prometheus binary: run scripts/ensure-prometheus.sh")
	}
	return p
}

// startPrometheus runs a Prometheus of the test's own on loopback that
// scrapes target's /metrics every second, and returns its address.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin := prometheusBinary(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: pybox\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	out := &syncBuffer{}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus:\n%s", out.String())
		}
	})
	waitFor(t, "prometheus", 60*time.Second, func() bool { return answersOK(http.DefaultClient, "http://"+addr+"/-/ready") })
	return addr
}

// answersOK says whether a GET of url answers 200.
func answersOK(c *http.Client, url string) bool {
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// promQuery asks Prometheus' HTTP API for an instant vector's one value;
// ok is false while the query has no result.
func promQuery(t *testing.T, addr, query string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		t.Fatalf("query %s: %v", query, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("query %s: %v %s %s", query, err, body.Status, body.Error)
	}
	if len(body.Data.Result) != 1 {
		return 0, false
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// TestOperations: a running pybox scraped by a real Prometheus (Debian's,
// on loopback) through a burst of 100 calls: the call count, an error kind
// and latency quantiles read back through Prometheus' HTTP API match what
// the test sent and measured; the audit log has one line per call, each
// with the code's digest, and a secret the code holds and prints is in
// none of them.
func TestOperations(t *testing.T) {
	testenv.Engine(t, image())
	metrics := freeAddr(t)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	s := startServer(t, "--transport", "http", "--metrics-addr", metrics, "--audit-log", audit, "--max-queue", "128", "--pool", "3", "--pool-max", "8")
	prom := startPrometheus(t, metrics)

	const secret = "sk-pybox-canary-4f1d2e9a7b3c5d6e8f0a1b2c"
	const slowTimeout = 6 // seconds
	okCode := fmt.Sprintf("token = %q\nprint('the token is', token)\n", secret)
	slowCode := fmt.Sprintf("import time\ntoken = %q\ntime.sleep(600)\n", secret)
	type sent struct {
		args    map[string]any
		kind    string // the error kind the call must get
		code    string // what the audit line's digest is of
		took    time.Duration
		isError bool
	}
	var calls []*sent
	for i := range 100 {
		switch {
		case i%10 == 3: // 10 calls stopped at their timeout
			calls = append(calls, &sent{args: map[string]any{"code": slowCode, "timeout": slowTimeout}, kind: "timeout", code: slowCode})
		case i%20 == 7: // 5 calls with bad input, which never run
			calls = append(calls, &sent{args: map[string]any{"code": okCode, "timeout": -1}, kind: "invalid_input"})
		default:
			calls = append(calls, &sent{args: map[string]any{"code": okCode}, kind: "", code: okCode})
		}
	}
	var wg sync.WaitGroup
	next := make(chan *sent)
	errs := make(chan error, len(calls))
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				start := time.Now()
				out, isError, err := callHTTP(s.addr, c.args)
				c.took = time.Since(start)
				if err != nil {
					errs <- err
					continue
				}
				c.isError = isError
				if kind, _ := out["error"].(string); kind != c.kind {
					errs <- fmt.Errorf("a call got error %q; want %q: %v", kind, c.kind, out)
				}
				if strings.Contains(fmt.Sprint(out), secret) {
					errs <- fmt.Errorf("the secret came back unredacted: %v", out)
				}
			}
		}()
	}
	for _, c := range calls {
		next <- c
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Prometheus has scraped the totals once they match: up to 30 s.
	var total float64
	waitFor(t, "Prometheus to scrape 100 calls", 30*time.Second, func() bool {
		total, _ = promQuery(t, prom, `sum(pybox_calls_total)`)
		return total == 100
	})
	if v, _ := promQuery(t, prom, `sum(pybox_calls_total{error_kind="timeout",outcome="stopped"})`); v != 10 {
		t.Errorf("timeouts in Prometheus: %v; want 10", v)
	}
	if v, _ := promQuery(t, prom, `sum(pybox_calls_total{error_kind="invalid_input",outcome="not_run"})`); v != 5 {
		t.Errorf("invalid inputs in Prometheus: %v; want 5", v)
	}
	if v, _ := promQuery(t, prom, `sum(pybox_calls_total{error_kind="none",outcome="ok"})`); v != 85 {
		t.Errorf("successful calls in Prometheus: %v; want 85", v)
	}
	for _, q := range []string{`pybox_sandboxes_created_total`, `pybox_pool_hits_total + pybox_pool_misses_total`, `pybox_redacted_bytes_total`, `process_resident_memory_bytes{job="pybox"}`} {
		if v, ok := promQuery(t, prom, q); !ok || v <= 0 {
			t.Errorf("%s: %v; want above 0", q, v)
		}
	}

	// Each query of the Grafana dashboard runs on this Prometheus.
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if raw, err := os.ReadFile("../../deploy/grafana/pybox-dashboard.json"); err != nil || json.Unmarshal(raw, &dash) != nil {
		t.Fatalf("the dashboard: %v", err)
	}
	vars := strings.NewReplacer("$job", "pybox", "$instance", ".*", "$__rate_interval", "1m", "$__range", "5m")
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if v, ok := promQuery(t, prom, vars.Replace(tg.Expr)); ok && (p.Title == "Ready" && v != 1) {
				t.Errorf("the dashboard's %q: %v", p.Title, v)
			}
		}
	}

	// The audit log: one line per call, each whole, none with the secret.
	f, err := os.Open(audit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	raw, _ := io.ReadAll(f)
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), "the token is") {
		t.Error("the audit log holds the code's secret or its output")
	}
	digests := map[string]int{}
	ids := map[string]bool{}
	kinds := map[string]int{}
	var durations []float64
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	lines := 0
	for sc.Scan() {
		lines++
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %d is not JSON: %v", lines, err)
		}
		id, _ := rec["call"].(string)
		if id == "" || ids[id] || rec["event"] != "run_python" || rec["time"] == nil || rec["mcp_session"] == nil {
			t.Errorf("audit line %d: %v", lines, rec)
		}
		ids[id] = true
		d, _ := rec["code_sha256"].(string)
		digests[d]++
		kind, _ := rec["error"].(string)
		kinds[kind]++
		secs, _ := rec["duration_seconds"].(float64)
		durations = append(durations, secs)
	}
	if lines != 100 {
		t.Errorf("the audit log has %d lines; want 100, one per call", lines)
	}
	digest := func(code string) string { s := sha256.Sum256([]byte(code)); return hex.EncodeToString(s[:]) }
	if digests[digest(okCode)] != 85 || digests[digest(slowCode)] != 10 || digests[""] != 5 {
		t.Errorf("the audit log's code digests: %v; want 85 of the quick code, 10 of the slow one, 5 empty (input refused)", digests)
	}
	if kinds[""] != 85 || kinds["timeout"] != 10 || kinds["invalid_input"] != 5 {
		t.Errorf("the audit log's error kinds: %v", kinds)
	}

	// The latency quantiles Prometheus estimates from the histogram lie in
	// the bucket of the true quantile: the same rank among the durations
	// the server observed, which the audit log holds; each of those is
	// within what the test measured from outside.
	var took []time.Duration
	for _, c := range calls {
		took = append(took, c.took)
	}
	slices.Sort(took)
	slices.Sort(durations)
	for _, q := range []float64{0.5, 0.95} {
		rank := int(math.Ceil(q * float64(len(durations))))
		truth := durations[rank-1]
		lo, hi := 0.0, math.Inf(1)
		for _, b := range durationBuckets {
			if truth <= b {
				hi = b
				break
			}
			lo = b
		}
		est, _ := promQuery(t, prom, fmt.Sprintf(`histogram_quantile(%g, sum by (le) (pybox_call_duration_seconds_bucket))`, q))
		measured := took[rank-1]
		t.Logf("p%g: Prometheus %.3f s; the server's own %.3f s, in bucket (%g, %g]; measured by the client %v", q*100, est, truth, lo, hi, measured)
		if est < lo || est > hi {
			t.Errorf("Prometheus' p%g is %.3f s; the true one, %.3f s, is in (%g, %g]", q*100, est, truth, lo, hi)
		}
		if truth > measured.Seconds() {
			t.Errorf("the server's p%g (%.3f s) is above the client's (%v)", q*100, truth, measured)
		}
	}
	// The test sent 10% of calls that run into their timeout.
	if durations[94] < slowTimeout {
		t.Errorf("the server's p95 is %.3f s; 10 calls ran into their %d s timeout", durations[94], slowTimeout)
	}
}

// TestReadyzFollowsTheEngine: /readyz turns unready within 5 s of the
// engine stopping, and ready again once it is back; /healthz answers all
// along, with no token, while /metrics wants the token.
func TestReadyzFollowsTheEngine(t *testing.T) {
	e := testenv.Private(t, image())
	t.Cleanup(func() { e.Start() })
	const token = "ops-test-token-0123456789abcdef"
	s := startServerEnv(t, []string{"DOCKER_HOST=" + e.Host}, "--transport", "http", "--auth-token", token)
	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, "/readyz to say ready", 60*time.Second, func() bool { code, _ := get("/readyz", ""); return code == http.StatusOK })
	if code, _ := get("/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d; want 401", code)
	}
	if code, body := get("/metrics", token); code != http.StatusOK || !strings.Contains(body, "pybox_ready 1") {
		t.Errorf("/metrics with the token: %d, pybox_ready 1 missing", code)
	}

	stopped := time.Now()
	e.Stop()
	var body string
	for {
		code, b := get("/readyz", "")
		if code == http.StatusServiceUnavailable {
			body = b
			break
		}
		if time.Since(stopped) > 5*time.Second {
			t.Fatalf("/readyz still says %d %s 5 s after the engine stopped", code, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("unready %v after the engine stopped: %s", time.Since(stopped).Round(time.Millisecond), strings.TrimSpace(body))
	// The engine's own check says so too, within the same 5 s (the pool's
	// failing starts may say it first).
	const down = `"engine":"the Docker engine does not answer"`
	for !strings.Contains(body, down) && time.Since(stopped) < 5*time.Second {
		time.Sleep(100 * time.Millisecond)
		_, body = get("/readyz", "")
	}
	if !strings.Contains(body, down) || strings.Contains(body, e.Host) {
		t.Errorf("/readyz 5 s after the engine stopped: %s; want the engine's check named, and no address", body)
	}
	if code, _ := get("/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz with the engine down: %d; want 200 (the process serves)", code)
	}

	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitFor(t, "/readyz to say ready after the engine is back", 60*time.Second, func() bool { code, _ := get("/readyz", ""); return code == http.StatusOK })
	t.Logf("ready %v after the engine answered again", time.Since(back).Round(time.Millisecond))
}

// TestAuditLogFlag: an audit log that cannot be opened stops the server at
// start, with exit status 2 and the flag named.
func TestAuditLogFlag(t *testing.T) {
	cmd := exec.CommandContext(context.Background(), binary, "serve", "--audit-log", "/nonexistent-dir/audit.jsonl")
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix:///nonexistent.sock")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--audit-log") {
		t.Errorf("an audit log that cannot be opened: %v\n%s", err, out)
	}
}

// promtool is Debian's promtool, beside prometheus.
func promtool(t *testing.T) string {
	t.Helper()
	prometheusBinary(t)
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("prometheus without promtool: reinstall Debian's prometheus package")
	}
	return p
}

// TestMetricsFollowNamingConventions: every metric /metrics exposes, after
// calls of each kind, passes `promtool check metrics` (Prometheus' naming
// and unit conventions), and no label takes a value from the call.
func TestMetricsFollowNamingConventions(t *testing.T) {
	tool := promtool(t)
	sb := newOfflineSandbox(t)
	o := newOps(sb, "docker", nil, zerologNop())
	for _, c := range sampleCalls() {
		o.onCall(c)
	}
	mux := http.NewServeMux()
	o.handle(mux, func(h http.Handler) http.Handler { return h })
	rec := newRecorder()
	mux.ServeHTTP(rec, mustRequest(t, "/metrics"))
	body := rec.Body.String()
	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	for _, want := range []string{
		`pybox_calls_total{error_kind="timeout",outcome="stopped"} 1`,
		`pybox_calls_total{error_kind="invalid_input",outcome="not_run"} 1`,
		`pybox_calls_total{error_kind="none",outcome="code_error"} 1`,
		`pybox_calls_total{error_kind="none",outcome="ok"} 1`,
		`pybox_call_duration_seconds_count{sandbox="pool"} 3`,
		`pybox_call_duration_seconds_count{sandbox="none"} 1`,
		`pybox_redacted_bytes_total 300`,
		"go_memstats_heap_inuse_bytes", "process_resident_memory_bytes", "pybox_build_info{",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, c := range sampleCalls() {
		if strings.Contains(body, c.ID) || (c.CodeSHA256 != "" && strings.Contains(body, c.CodeSHA256)) {
			t.Errorf("/metrics holds a call's id or digest")
		}
	}
}

// TestAlertRules: the alert rules in deploy/ load (`promtool check
// rules`) and fire as their unit tests say (`promtool test rules`).
func TestAlertRules(t *testing.T) {
	tool := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "../../deploy/prometheus/pybox-alerts.yml"},
		{"test", "rules", "../../deploy/prometheus/pybox-alerts_test.yml"},
	} {
		if out, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestGrafanaDashboard: the dashboard is JSON, and each panel's queries
// name metrics that /metrics exposes.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/pybox-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	sb := newOfflineSandbox(t)
	o := newOps(sb, "docker", nil, zerologNop())
	for _, c := range sampleCalls() {
		o.onCall(c)
	}
	mfs, err := o.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, mf := range mfs {
		known[mf.GetName()] = true
	}
	metricName := regexpMetric()
	if len(d.Panels) < 6 {
		t.Errorf("the dashboard has %d panels", len(d.Panels))
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !known[m] && !known[base] {
					t.Errorf("panel %q queries %s, which /metrics does not expose", p.Title, m)
				}
			}
		}
	}
}

// newOfflineSandbox is a Sandbox that is never asked to run anything.
func newOfflineSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.New(sandbox.Options{Image: image()}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sb.Close(ctx)
	})
	return sb
}

func zerologNop() zerolog.Logger { return zerolog.Nop() }

// sampleCalls are calls of each outcome, as the server reports them.
func sampleCalls() []server.Call {
	pool := server.Timing{Handler: 20 * time.Millisecond, Sandbox: sandbox.Timing{Source: sandbox.SourcePool, Redact: 50 * time.Microsecond}}
	return []server.Call{
		{ID: "c0ffee0000000001", CodeSHA256: strings.Repeat("a", 64), ExitCode: 0, RedactedBytes: 100, Timing: pool},
		{ID: "c0ffee0000000002", CodeSHA256: strings.Repeat("b", 64), ExitCode: 1, RedactedBytes: 100, Timing: pool},
		{ID: "c0ffee0000000003", CodeSHA256: strings.Repeat("c", 64), ExitCode: 137, Error: "timeout", RedactedBytes: 100, Timing: pool},
		{ID: "c0ffee0000000004", ExitCode: -1, Error: "invalid_input", Timing: server.Timing{Handler: time.Millisecond}},
	}
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func mustRequest(t *testing.T, path string) *http.Request {
	t.Helper()
	return httptest.NewRequest(http.MethodGet, path, nil)
}

// regexpMetric finds the metric names in a PromQL expression.
func regexpMetric() *regexp.Regexp {
	return regexp.MustCompile(`\b(?:pybox|process|go)_[a-z0-9_]+`)
}
