package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/rs/zerolog"

	"github.com/pybox/pybox/sandbox"
	"github.com/pybox/pybox/server"
)

// shutdownTimeout bounds the removal of containers at exit.
const shutdownTimeout = 30 * time.Second

func cmdServe(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var cfg config
	fs := flagSet("serve", true, &cfg)
	if done, code := parseCommand(fs, args, stdout, stderr, "Usage: pybox serve [flags]", &cfg); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pybox serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	rd, logger, err := cfg.logging(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "pybox:", err)
		return 2
	}
	switch cfg.transport {
	case "stdio":
	case "http", "sse":
		if err := checkExposure(cfg.addr, len(cfg.tokens) > 0); err != nil {
			logger.Error().Err(err).Msg("refusing to start")
			fmt.Fprintln(stderr, "pybox:", err)
			return 2
		}
	default:
		fmt.Fprintf(stderr, "pybox: --transport %q: use stdio, http or sse\n", cfg.transport)
		return 2
	}

	sb, err := sandbox.New(cfg.sandboxOptions(rd), logger)
	if err != nil {
		fmt.Fprintln(stderr, "pybox:", err)
		return 2
	}
	startupChecks(ctx, sb, cfg.runtimeName(), logger)
	startJanitor()
	audit, err := openAudit(ctx, cfg.auditLog, stderr, logger)
	if err != nil {
		fmt.Fprintln(stderr, "pybox:", err)
		return 2
	}
	defer audit.close()
	o := newOps(sb, cfg.backend, audit, logger)
	var opsLn net.Listener
	if cfg.metricsAddr != "" {
		if opsLn, err = net.Listen("tcp", cfg.metricsAddr); err != nil {
			fmt.Fprintf(stderr, "pybox: --metrics-addr: %v\n", err)
			return 2
		}
	}
	sopt := cfg.serverOptions(sb, rd, logger)
	sopt.OnCall = o.onCall
	srv := server.New(sopt)
	o.serving(srv)
	mcp := srv.MCP()
	if opsLn != nil || cfg.transport != "stdio" {
		go o.watch(ctx)
	}
	if opsLn != nil {
		go func() {
			if err := o.serveOps(ctx, opsLn); err != nil {
				logger.Error().Err(err).Msg("serving /healthz, /readyz and /metrics failed")
			}
		}()
	}

	logger.Info().Str("transport", cfg.transport).Str("version", version()).
		Str("image", sb.Image()).Str("engine", sb.EngineHost()).Msg("pybox serving")
	go returnMemory(ctx, sb)
	switch cfg.transport {
	case "stdio":
		err = serveStdio(ctx, mcp, cfg, stdin, stdout, logger)
	default:
		err = serveHTTP(ctx, srv, o, cfg, logger)
	}

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	srv.Close(cctx)
	if cerr := sb.Close(cctx); cerr != nil {
		logger.Error().Err(cerr).Msg("removing sandboxes at exit failed")
	}
	logger.Info().Msg("pybox stopped")
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		logger.Error().Err(err).Msg("serving failed")
		return 1
	}
	return 0
}

// startupChecks logs what a first call would trip over, and removes the
// containers of a server that died; it never stops the server, which keeps
// answering with sandbox_unavailable until the engine and image are there.
func startupChecks(ctx context.Context, sb *sandbox.Sandbox, runtime string, logger zerolog.Logger) {
	if _, err := sb.Ping(ctx); err != nil {
		logger.Warn().Err(err).Msg("the " + sb.EngineKind() + " does not answer; calls will fail with sandbox_unavailable until it does (run `pybox doctor`)")
		return
	}
	if info, err := sb.EngineInfo(ctx); err == nil {
		for _, a := range info.Advisories(runtime) {
			if strings.HasPrefix(a, "stronger isolation") {
				logger.Info().Msg(a)
			} else {
				logger.Warn().Msg(a)
			}
		}
		if runtime != "runc" && runtime != "" && !slices.Contains(info.Runtimes, runtime) {
			logger.Warn().Str("runtime", runtime).Strs("engine_runtimes", info.Runtimes).Msg("the engine has no such runtime; calls will fail with sandbox_unavailable (scripts/ensure-gvisor.sh registers runsc)")
		}
	}
	if n, err := sb.Reap(ctx); err != nil {
		logger.Warn().Err(err).Msg("could not list containers left by earlier servers")
	} else if n > 0 {
		logger.Info().Int("removed", n).Msg("removed containers left by earlier servers")
	}
	st, err := sb.ImageStatus(ctx)
	switch {
	case err != nil:
		logger.Warn().Err(err).Msg("could not inspect the sandbox image")
	case !st.Present:
		logger.Warn().Str("image", st.Ref).Msg("the sandbox image is missing; build it with `sudo pybox image build` (or `docker build -t " + st.Ref + " sandbox/image`)")
	case st.Unverified:
		logger.Info().Str("image", st.Ref).Msg("the cluster does not report the image's version label; make sure it is the one of this pybox (" + sandbox.ImageVersion + ")")
	case !st.Current:
		logger.Warn().Str("image", st.Ref).Str("version", st.Version).Str("want", sandbox.ImageVersion).Msg("the sandbox image is not the version this pybox expects; rebuild it with `sudo pybox image build`")
	}
}

func serveStdio(ctx context.Context, mcp *mcpserver.MCPServer, cfg config, stdin io.Reader, stdout io.Writer, logger zerolog.Logger) error {
	workers := min(100, cfg.maxConcurrent+cfg.maxQueue+1)
	s := mcpserver.NewStdioServer(mcp)
	s.SetErrorLogger(log.New(zerologWriter{logger}, "", 0))
	mcpserver.WithWorkerPoolSize(workers)(s)
	return s.Listen(ctx, stdin, stdout)
}

// zerologWriter carries the MCP library's own log lines into ours.
type zerologWriter struct{ l zerolog.Logger }

func (z zerologWriter) Write(p []byte) (int, error) {
	z.l.Warn().Str("source", "mcp").Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

func serveHTTP(ctx context.Context, srv *server.Server, o *ops, cfg config, logger zerolog.Logger) error {
	mcp := srv.MCP()
	mux := http.NewServeMux()
	// The edge of every endpoint, outermost first (see edge.go).
	edge := func(h http.Handler) http.Handler {
		return guardOrigin(cfg.origins)(bearerAuth(cfg.tokens)(requireJSON(limitBody(int64(cfg.maxRequestBytes))(taskEvents(srv.OwnsTask)(h)))))
	}
	switch cfg.transport {
	case "http":
		// An MCP session (and so its Python sessions) ends when the client
		// deletes it, or when it has been idle as long as a Python session may.
		h := mcpserver.NewStreamableHTTPServer(mcp, mcpserver.WithEndpointPath("/mcp"), mcpserver.WithStateful(true), mcpserver.WithSessionIdleTTL(cfg.sessionIdle))
		mux.Handle("/mcp", edge(endSessionsOnDelete(h, srv)))
	case "sse":
		s := mcpserver.NewSSEServer(mcp)
		mux.Handle("/sse", edge(s.SSEHandler()))
		mux.Handle("/message", edge(s.MessageHandler()))
	}
	// The probes need no token and say nothing sensitive; the metrics
	// need the token when one is set.
	o.handle(mux, bearerAuth(cfg.tokens))
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(zerologWriter{logger}, "", 0),
	}
	logger.Info().Str("addr", ln.Addr().String()).Int("tokens", len(cfg.tokens)).Int("allowed_origins", len(cfg.origins.allowed)).Msg("listening")
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	_ = hs.Close() // streams that did not end in time
	return nil
}

// endSessionsOnDelete ends the Python sessions of an MCP session that the
// client deletes, as the Streamable HTTP transport's way to close it.
func endSessionsOnDelete(next http.Handler, srv *server.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if r.Method == http.MethodDelete {
			srv.EndSessionsOf(context.WithoutCancel(r.Context()), r.Header.Get("Mcp-Session-Id"))
		}
	})
}

// limitBody refuses a request whose body is over max bytes: at once when
// its Content-Length says so, before any of it is read, and as soon as a
// body of unknown length passes it.
func limitBody(max int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > max {
				tooLarge(w, r.ContentLength, max)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, max)
			next.ServeHTTP(w, r)
		})
	}
}

// tooLarge answers 413 with a JSON-RPC error that says the limit.
func tooLarge(w http.ResponseWriter, size, max int64) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"pybox: the request body is %d bytes; at most %d are accepted (--max-request-bytes: the code limit and the input file limit, base64-encoded, with room for JSON). Send less data, or raise --max-input-bytes."}}`+"\n", size, max)
}

// returnMemory gives the memory a burst of calls used back to the system
// once the server is idle: Go's runtime returns freed memory only slowly
// and collects garbage only when it allocates, so an idle server would
// keep the high-water mark of the burst for minutes.
func returnMemory(ctx context.Context, sb *sandbox.Sandbox) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	var m runtime.MemStats
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if running, waiting, _ := sb.Stats(); running > 0 || waiting > 0 {
			continue
		}
		// What the heap holds free and has not given back: past a few
		// MiB, the whole of it goes back at once (the runtime's own
		// scavenger returns it over minutes).
		runtime.ReadMemStats(&m)
		if m.HeapIdle-m.HeapReleased > 16<<20 {
			debug.FreeOSMemory()
		}
	}
}

// checkExposure refuses to serve HTTP off loopback without a token.
func checkExposure(addr string, tokens bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", addr, err)
	}
	if tokens || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("--addr %s is reachable from other machines and no token is set: anyone who reaches it could run code. Set PYBOX_AUTH_TOKEN (or --auth-token), or bind 127.0.0.1", addr)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
