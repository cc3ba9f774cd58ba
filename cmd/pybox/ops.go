package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/pybox/pybox/sandbox"
	"github.com/pybox/pybox/server"
)

// What an operator watches: /healthz (the process serves), /readyz (the
// engine or cluster answers, the image is there, the pool's starts do not
// fail), /metrics (Prometheus) and the audit log (a JSON line per call).
// None of it holds code, output or a secret.

// Readiness is probed in the background, so that /readyz answers at once
// and turns within readyInterval + readyTimeout of a change.
const (
	readyInterval = time.Second
	readyTimeout  = 2 * time.Second
	// imageEvery spaces the image checks while the engine answers.
	imageEvery = 10 * time.Second
)

// durationBuckets are the call latency histogram's bounds, in seconds:
// from a warm call (milliseconds) to the longest timeout (300 s).
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// ops holds the metrics, the readiness state and the audit log of one
// server.
type ops struct {
	sb  *sandbox.Sandbox
	srv atomic.Pointer[server.Server]
	log zerolog.Logger
	reg *prometheus.Registry

	calls         *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	queue         prometheus.Histogram
	redactSeconds prometheus.Histogram
	redactedBytes prometheus.Counter

	audit *auditLog

	mu    sync.Mutex
	state readyState
}

// readyState is the newest readiness probe.
type readyState struct {
	Ready  bool
	Checks map[string]string
	// imageAt is when the image was last checked, imageOK its answer.
	imageAt time.Time
	imageOK string
}

func newOps(sb *sandbox.Sandbox, backend string, audit *auditLog, log zerolog.Logger) *ops {
	o := &ops{sb: sb, log: log, audit: audit, reg: prometheus.NewRegistry(),
		state: readyState{Checks: map[string]string{"engine": "not checked yet"}}}
	o.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pybox_calls_total",
		Help: "run_python calls answered, by outcome (ok: the code exited 0; code_error: it exited non-zero by itself; stopped: pybox stopped it or lost its sandbox; not_run: it did not run) and error kind (none, or the result's error field).",
	}, []string{"outcome", "error_kind"})
	o.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pybox_call_duration_seconds",
		Help:    "Time from a run_python call's arrival in the tool handler to its answer, by where its sandbox came from (pool, cold, session, none).",
		Buckets: durationBuckets,
	}, []string{"sandbox"})
	o.queue = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "pybox_call_queue_wait_seconds",
		Help:    "Time a call waited for a sandbox slot (and in a session for its earlier call).",
		Buckets: durationBuckets,
	})
	o.redactSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "pybox_redaction_duration_seconds",
		Help:    "Time the redaction of one call's streams and output files took.",
		Buckets: []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5},
	})
	o.redactedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pybox_redacted_bytes_total",
		Help: "Bytes of output (streams as kept, and output files) passed through redaction.",
	})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func(sandbox.Counters) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(sb.Counters())) })
	}
	pool := func(f func(size, ready, starting, waiting int) int) func() float64 {
		return func() float64 { return float64(f(sb.PoolStats())) }
	}
	o.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		o.calls, o.duration, o.queue, o.redactSeconds, o.redactedBytes,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pybox_build_info", Help: "Always 1; its labels say pybox's version and its backend (docker or kubernetes).",
			ConstLabels: prometheus.Labels{"version": version(), "backend": backend}}, func() float64 { return 1 }),
		gauge("pybox_calls_running", "Calls whose sandbox runs now.", func() float64 { r, _, _ := sb.Stats(); return float64(r) }),
		gauge("pybox_calls_queued", "Calls waiting for a sandbox slot.", func() float64 { _, w, _ := sb.Stats(); return float64(w) }),
		gauge("pybox_pool_size", "The size the warm pool keeps now (it follows demand between --pool and --pool-max).", pool(func(size, _, _, _ int) int { return size })),
		gauge("pybox_pool_ready", "Pooled sandboxes ready for a call.", pool(func(_, ready, _, _ int) int { return ready })),
		gauge("pybox_pool_starting", "Pooled sandboxes being started.", pool(func(_, _, starting, _ int) int { return starting })),
		counter("pybox_pool_hits_total", "Calls that found a pooled sandbox ready.", func(c sandbox.Counters) int64 { return c.PoolHits }),
		counter("pybox_pool_misses_total", "Calls that found the pool empty and waited for a start.", func(c sandbox.Counters) int64 { return c.PoolMisses }),
		gauge("pybox_sessions_live", "Python sessions this server holds, those starting included.", func() float64 {
			if srv := o.srv.Load(); srv != nil {
				return float64(srv.LiveSessions())
			}
			return 0
		}),
		counter("pybox_sandboxes_created_total", "Containers (or pods) made for calls, sessions and the pool.", func(c sandbox.Counters) int64 { return c.Created }),
		counter("pybox_sandboxes_removed_total", "Containers (or pods) removed, those of dead servers included.", func(c sandbox.Counters) int64 { return c.Removed }),
		counter("pybox_sandbox_removal_failures_total", "Removals the engine refused or did not answer (each is retried).", func(c sandbox.Counters) int64 { return c.RemoveFailures }),
		counter("pybox_sandbox_start_failures_total", "Sandboxes that could not be made, started or made ready.", func(c sandbox.Counters) int64 { return c.StartFailures }),
		gauge("pybox_ready", "1 when /readyz says ready: the engine answers, the image is there, the pool's starts do not fail.", func() float64 {
			if o.readiness().Ready {
				return 1
			}
			return 0
		}),
	)
	return o
}

// serving tells the metrics which server's sessions to count.
func (o *ops) serving(srv *server.Server) { o.srv.Store(srv) }

// onCall records one answered call: metrics and the audit line.
func (o *ops) onCall(c server.Call) {
	kind := c.Error
	if kind == "" {
		kind = "none"
	}
	o.calls.WithLabelValues(outcome(c), kind).Inc()
	source := string(c.Timing.Sandbox.Source)
	if source == "" {
		source = "none"
	}
	o.duration.WithLabelValues(source).Observe(c.Timing.Handler.Seconds())
	if c.Timing.Sandbox.Source != sandbox.SourceNone {
		o.queue.Observe(c.Timing.Sandbox.Queue.Seconds())
		o.redactSeconds.Observe(c.Timing.Sandbox.Redact.Seconds())
		o.redactedBytes.Add(float64(c.RedactedBytes))
	}
	o.audit.write(c)
}

// outcome names how a call ended, for the calls counter.
func outcome(c server.Call) string {
	switch {
	case c.Timing.Sandbox.Source == sandbox.SourceNone && c.Error != "":
		return "not_run"
	case c.Error != "":
		return "stopped"
	case c.ExitCode != 0:
		return "code_error"
	default:
		return "ok"
	}
}

func (o *ops) readiness() readyState {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.state
}

// watch probes readiness until ctx ends.
func (o *ops) watch(ctx context.Context) {
	t := time.NewTicker(readyInterval)
	defer t.Stop()
	for {
		o.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe checks the engine, then (every imageEvery, or when the engine has
// just come back) the image, and the pool.
func (o *ops) probe(ctx context.Context) {
	prev := o.readiness()
	checks := map[string]string{}
	pctx, cancel := context.WithTimeout(ctx, readyTimeout)
	_, err := o.sb.Ping(pctx)
	cancel()
	next := readyState{Checks: checks, imageAt: prev.imageAt, imageOK: prev.imageOK}
	if err != nil {
		checks["engine"] = "the " + o.sb.EngineKind() + " does not answer"
		next.imageAt = time.Time{} // checked again as soon as it answers
	} else {
		checks["engine"] = "ok"
		if next.imageAt.IsZero() || time.Since(next.imageAt) >= imageEvery || next.imageOK != "ok" {
			ictx, cancel := context.WithTimeout(ctx, readyTimeout)
			st, err := o.sb.ImageStatus(ictx)
			cancel()
			switch {
			case err != nil:
				next.imageOK = "the image could not be checked"
			case !st.Present:
				next.imageOK = "the sandbox image " + st.Ref + " is missing"
			default:
				next.imageOK = "ok"
			}
			next.imageAt = time.Now()
		}
		checks["image"] = next.imageOK
	}
	if o.sb.PoolFailing() {
		checks["pool"] = "starting pooled sandboxes fails"
	} else {
		checks["pool"] = "ok"
	}
	next.Ready = checks["engine"] == "ok" && checks["image"] == "ok" && checks["pool"] == "ok"
	if next.Ready != prev.Ready && ctx.Err() == nil {
		ev := o.log.Info()
		if !next.Ready {
			ev = o.log.Warn()
		}
		ev.Bool("ready", next.Ready).Interface("checks", checks).Msg("readiness changed")
	}
	o.mu.Lock()
	o.state = next
	o.mu.Unlock()
}

// handle adds /healthz, /readyz and /metrics to mux; /metrics passes
// guard first (the bearer token on the MCP address).
func (o *ops) handle(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		st := o.readiness()
		code, status := http.StatusOK, "ready"
		if !st.Ready {
			code, status = http.StatusServiceUnavailable, "unready"
		}
		writeJSON(w, code, map[string]any{"status": status, "checks": st.Checks})
	})
	mux.Handle("/metrics", guard(promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{ErrorLog: nil})))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// serveOps serves /healthz, /readyz and /metrics on an address of their
// own (--metrics-addr, listened on by ln), without a token, until ctx
// ends.
func (o *ops) serveOps(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	o.handle(mux, func(h http.Handler) http.Handler { return h })
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	o.log.Info().Str("addr", ln.Addr().String()).Msg("serving /healthz, /readyz and /metrics")
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// auditLog writes one JSON line per call to a file or stderr; nil writes
// nothing.
type auditLog struct {
	path string // "" for stderr
	mu   sync.Mutex
	w    io.Writer
	f    *os.File
	log  zerolog.Logger
	// failedAt is when a write last failed, to log failures once a minute.
	failedAt time.Time
}

// auditRecord is one line of the audit log; docs/OPERATIONS.md lists
// its fields.
type auditRecord struct {
	Time          string  `json:"time"`
	Event         string  `json:"event"`
	Call          string  `json:"call"`
	MCPSession    string  `json:"mcp_session,omitempty"`
	Principal     string  `json:"principal,omitempty"`
	CodeSHA256    string  `json:"code_sha256,omitempty"`
	CodeBytes     int     `json:"code_bytes"`
	InputFiles    int     `json:"input_files"`
	InputBytes    int64   `json:"input_bytes"`
	PythonSession bool    `json:"python_session"`
	StdoutBytes   int64   `json:"stdout_bytes"`
	StderrBytes   int64   `json:"stderr_bytes"`
	OutputFiles   int     `json:"output_files"`
	OutputBytes   int64   `json:"output_bytes"`
	Duration      float64 `json:"duration_seconds"`
	ExecutionTime float64 `json:"execution_time"`
	ExitCode      int     `json:"exit_code"`
	Error         string  `json:"error"`
	Truncated     bool    `json:"truncated"`
	Sandbox       string  `json:"sandbox"`
}

// openAudit opens the audit log: "" for none, "-" for stderr, else a file,
// appended to and reopened on SIGUSR1 (for logrotate).
func openAudit(ctx context.Context, where string, stderr io.Writer, log zerolog.Logger) (*auditLog, error) {
	switch where {
	case "":
		return nil, nil
	case "-":
		return &auditLog{w: stderr, log: log}, nil
	}
	a := &auditLog{path: where, log: log}
	if err := a.reopen(); err != nil {
		return nil, err
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(c)
		for {
			select {
			case <-ctx.Done():
				return
			case <-c:
				if err := a.reopen(); err != nil {
					log.Error().Err(err).Msg("reopening the audit log failed; writing on to the old file")
				}
			}
		}
	}()
	return a, nil
}

func (a *auditLog) reopen() error {
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("--audit-log: %w", err)
	}
	a.mu.Lock()
	old := a.f
	a.f, a.w = f, f
	a.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// close closes the audit file; nil-safe.
func (a *auditLog) close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		a.f.Close()
		a.f, a.w = nil, io.Discard
	}
}

// write appends a call's line, in one write; nil-safe.
func (a *auditLog) write(c server.Call) {
	if a == nil {
		return
	}
	rec := auditRecord{
		Time: c.Start.UTC().Format(time.RFC3339Nano), Event: "run_python", Call: c.ID,
		Principal: c.Principal, CodeSHA256: c.CodeSHA256, CodeBytes: c.CodeBytes,
		InputFiles: c.InputFiles, InputBytes: c.InputBytes, PythonSession: c.InSession,
		StdoutBytes: c.StdoutBytes, StderrBytes: c.StderrBytes, OutputFiles: c.OutputFiles, OutputBytes: c.OutputBytes,
		Duration: c.Timing.Handler.Seconds(), ExecutionTime: c.ExecutionTime.Seconds(),
		ExitCode: c.ExitCode, Error: c.Error, Truncated: c.Truncated, Sandbox: string(c.Timing.Sandbox.Source),
	}
	if c.MCPSession != "" {
		// The session's id lets a client into its session on some
		// transports: the log holds a digest that tells sessions apart.
		sum := sha256.Sum256([]byte(c.MCPSession))
		rec.MCPSession = hex.EncodeToString(sum[:8])
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return
	}
	line = append(line, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.w.Write(line); err != nil && time.Since(a.failedAt) > time.Minute {
		a.failedAt = time.Now()
		a.log.Error().Err(err).Msg("writing the audit log failed")
	}
}
