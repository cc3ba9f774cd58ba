package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	"github.com/rs/zerolog"

	"github.com/pybox/pybox/redact"
	"github.com/pybox/pybox/sandbox"
	"github.com/pybox/pybox/server"
)

// config is every setting of the command, from flags and PYBOX_* variables.
type config struct {
	// Serving.
	transport       string
	addr            string
	authTokens      stringList
	tokens          []authToken // from authTokens, by validate
	allowedOrigins  stringList
	origins         originPolicy // from allowedOrigins, by validate
	maxRequestBytes byteSize
	// Operations.
	metricsAddr string
	auditLog    string

	// Logging.
	logLevel  string
	logFormat string

	// Calls.
	timeout    time.Duration
	maxTimeout time.Duration

	// Sandbox.
	image   string
	runtime string

	// Kubernetes backend.
	backend          string
	kubeconfig       string
	namespace        string
	runtimeClass     string
	nodeSelector     stringList
	tolerations      stringList
	networkPolicy    string
	seccompLocalhost string
	imagePullPolicy  string
	memory           byteSize
	cpus             float64
	pids             int64
	tmpfsSize        byteSize
	network          bool
	readOnly         bool
	user             string
	uidRange         string
	uidBase          int // from uidRange, by validate
	uidCount         int
	allowRoot        bool
	capDropAll       bool
	noNewPrivs       bool
	seccomp          string
	logDriver        string
	maxConcurrent    int
	maxQueue         int
	queueTimeout     time.Duration
	outputLimit      byteSize

	// Files.
	maxInputBytes      byteSize
	maxInputFileBytes  byteSize
	maxOutputFiles     int
	maxOutputFileBytes byteSize
	maxOutputBytes     byteSize

	// Warm pool (serve only).
	pool         int
	poolMax      int
	poolParallel int
	preImport    stringList
	poolMaxIdle  time.Duration

	// Cleanup.
	reconcileInterval time.Duration

	// Sessions.
	maxSessions   int
	sessionIdle   time.Duration
	sessionMaxAge time.Duration

	// Tasks.
	maxTasks        int
	maxTasksPerConn int
	taskRetention   time.Duration

	// Redaction.
	redactValues      stringList
	redactPatterns    stringList
	redactDisable     stringList
	redactFile        string
	redactDecodeDepth int
}

// byteSize is a flag value such as 256m or 64KiB.
type byteSize int64

func (b *byteSize) String() string { return units.BytesSize(float64(*b)) }
func (b *byteSize) Set(s string) error {
	n, err := units.RAMInBytes(s)
	if err != nil {
		return fmt.Errorf("%q is not a size (try 256m or 64KiB)", s)
	}
	if n < 0 {
		return fmt.Errorf("%q is negative", s)
	}
	*b = byteSize(n)
	return nil
}

// stringList is a repeatable flag; from the environment it splits on commas.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// flagSet makes a flag set for one command with the settings it uses.
func flagSet(name string, withServe bool, cfg *config) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if withServe {
		fs.IntVar(&cfg.pool, "pool", 2, "started sandboxes kept waiting for calls, with Python up and common modules imported; 0 turns the pool off")
		fs.IntVar(&cfg.poolMax, "pool-max", 0, "the pool's cap as it follows demand: a call that finds it empty raises its size by one, 15 s without one lowers it back toward --pool (0: 4 x --pool)")
		fs.IntVar(&cfg.poolParallel, "pool-parallel", 0, "pooled sandboxes started at once (0: one per CPU core)")
		fs.Var(&cfg.preImport, "pre-import", "a module pooled sandboxes import ahead of the code (repeatable; comma-separated in PYBOX_PRE_IMPORT; default numpy, pandas, matplotlib.pyplot)")
		fs.DurationVar(&cfg.poolMaxIdle, "pool-max-idle", sandbox.DefaultPoolMaxIdle, "a pooled sandbox that waited this long is replaced")
		fs.StringVar(&cfg.transport, "transport", "stdio", "MCP transport: stdio, http (Streamable HTTP on /mcp) or sse (/sse and /message)")
		fs.StringVar(&cfg.addr, "addr", "127.0.0.1:8765", "address for the http and sse transports")
		fs.Var(&cfg.authTokens, "auth-token", "a bearer token HTTP requests must carry (required off loopback): TOKEN, or NAME:TOKEN to name the principal that owns its sessions where the protocol has no connection (repeatable; comma-separated in PYBOX_AUTH_TOKEN)")
		fs.Var(&cfg.allowedOrigins, "allowed-origin", "a web page origin, besides loopback pages, allowed to call the HTTP transports, such as https://app.example.com (repeatable; comma-separated in PYBOX_ALLOWED_ORIGIN)")
		cfg.maxRequestBytes = byteSize(defaultMaxRequestBytes(sandbox.DefaultMaxInputBytes))
		fs.Var(&cfg.maxRequestBytes, "max-request-bytes", "the largest HTTP request body, refused before it is read; left at its default, it follows --max-input-bytes (room for the largest valid call)")
		fs.StringVar(&cfg.metricsAddr, "metrics-addr", "", "an address of its own for /healthz, /readyz and /metrics (no token there), such as 127.0.0.1:9464; the http and sse transports serve them on --addr too")
		fs.StringVar(&cfg.auditLog, "audit-log", "", "where the audit log goes, one JSON line per run_python call: a file (appended; reopened on SIGHUP), - for stderr, or empty for none")
	}
	fs.StringVar(&cfg.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&cfg.logFormat, "log-format", "auto", "log format: json, console, or auto (console on a terminal)")

	fs.DurationVar(&cfg.timeout, "timeout", sandbox.DefaultTimeout, "default wall-clock limit of a call")
	fs.DurationVar(&cfg.maxTimeout, "max-timeout", 300*time.Second, "largest timeout a call may ask for")

	fs.StringVar(&cfg.image, "image", sandbox.DefaultImage, "sandbox image")
	fs.StringVar(&cfg.runtime, "runtime", "runc", "OCI runtime: runc, or runsc for gVisor")
	fs.StringVar(&cfg.backend, "backend", "docker", "where sandboxes run: docker (a Docker engine), or kubernetes (pods of a cluster)")
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubernetes: a kubeconfig file; by default found as kubectl finds it (in-cluster, KUBECONFIG, ~/.kube/config)")
	fs.StringVar(&cfg.namespace, "namespace", "", "kubernetes: the sandbox pods' namespace; by default the kubeconfig's or the service account's")
	fs.StringVar(&cfg.runtimeClass, "runtime-class", "", "kubernetes: the sandbox pods' RuntimeClass, such as gvisor; by default the cluster's default runtime")
	fs.Var(&cfg.nodeSelector, "node-selector", "kubernetes: KEY=VALUE a node must have to run sandbox pods (repeatable)")
	fs.Var(&cfg.tolerations, "toleration", "kubernetes: KEY[=VALUE]:EFFECT, a taint the sandbox pods tolerate (repeatable)")
	fs.StringVar(&cfg.networkPolicy, "network-policy", "create", "kubernetes: the sandbox pods' deny-all NetworkPolicy: create (when missing), require (refuse to start without it), or off")
	fs.StringVar(&cfg.seccompLocalhost, "seccomp-localhost", "", "kubernetes: a seccomp profile on every node (relative to the kubelet's seccomp directory) for the sandbox pods; by default the runtime's default profile")
	fs.StringVar(&cfg.imagePullPolicy, "image-pull-policy", "IfNotPresent", "kubernetes: the sandbox pods' image pull policy: IfNotPresent, Never or Always")
	cfg.memory = sandbox.DefaultMemoryBytes
	fs.Var(&cfg.memory, "memory", "memory limit of a sandbox, no swap")
	fs.Float64Var(&cfg.cpus, "cpus", 1, "CPUs of a sandbox")
	fs.Int64Var(&cfg.pids, "pids", sandbox.DefaultPidsLimit, "process and thread limit of a sandbox")
	cfg.tmpfsSize = sandbox.DefaultTmpfsBytes
	fs.Var(&cfg.tmpfsSize, "tmpfs-size", "size of the sandbox's /tmp")
	fs.BoolVar(&cfg.network, "network", false, "give sandboxes the engine's default network")
	fs.BoolVar(&cfg.readOnly, "read-only", true, "read-only root filesystem")
	fs.StringVar(&cfg.user, "user", sandbox.DefaultUser, "uid:gid every sandbox runs as, or auto: a uid of its own per live sandbox from --uid-range")
	fs.StringVar(&cfg.uidRange, "uid-range", fmt.Sprintf("%d-%d", sandbox.DefaultUIDBase, sandbox.DefaultUIDBase+sandbox.DefaultUIDCount-1), "the uids --user auto gives sandboxes (FIRST-LAST)")
	fs.BoolVar(&cfg.allowRoot, "allow-root", false, "allow what loosens the sandbox's privileges: --user root, --cap-drop-all=false")
	fs.BoolVar(&cfg.capDropAll, "cap-drop-all", true, "drop all capabilities (keeping them needs --allow-root)")
	fs.BoolVar(&cfg.noNewPrivs, "no-new-privileges", true, "set no-new-privileges")
	fs.StringVar(&cfg.seccomp, "seccomp", sandbox.SeccompPinned, "seccomp profile: pinned, engine, unconfined, or a JSON file")
	fs.StringVar(&cfg.logDriver, "log-driver", "none", "the engine's log driver for sandboxes")
	fs.IntVar(&cfg.maxConcurrent, "max-concurrent", sandbox.DefaultMaxConcurrent, "sandboxes running at once")
	fs.IntVar(&cfg.maxQueue, "max-queue", sandbox.DefaultMaxQueue, "calls waiting for a sandbox before too_many_requests")
	fs.DurationVar(&cfg.queueTimeout, "queue-timeout", sandbox.DefaultQueueTimeout, "longest wait for a sandbox")
	cfg.outputLimit = sandbox.DefaultOutputLimit
	fs.Var(&cfg.outputLimit, "output-limit", "output kept per stream (head and tail)")
	cfg.maxInputBytes, cfg.maxInputFileBytes = sandbox.DefaultMaxInputBytes, sandbox.DefaultMaxInputFileBytes
	cfg.maxOutputFileBytes, cfg.maxOutputBytes = sandbox.DefaultMaxOutputFileBytes, sandbox.DefaultMaxOutputBytes
	fs.Var(&cfg.maxInputBytes, "max-input-bytes", "input files of one call together")
	fs.Var(&cfg.maxInputFileBytes, "max-input-file-bytes", "one input file")
	fs.IntVar(&cfg.maxOutputFiles, "max-output-files", sandbox.DefaultMaxOutputFiles, "output files that come back from one call")
	fs.Var(&cfg.maxOutputFileBytes, "max-output-file-bytes", "one output file")
	fs.Var(&cfg.maxOutputBytes, "max-output-bytes", "output files of one call together")
	fs.DurationVar(&cfg.reconcileInterval, "reconcile-interval", sandbox.DefaultReconcileInterval, "how often removals that failed are retried and containers of dead servers on this host removed")
	fs.IntVar(&cfg.maxSessions, "max-sessions", server.DefaultMaxSessions, "live sessions (session_id \"new\") at most")
	fs.DurationVar(&cfg.sessionIdle, "session-idle", server.DefaultSessionIdle, "a session unused this long ends")
	fs.DurationVar(&cfg.sessionMaxAge, "session-max-age", server.DefaultSessionMaxAge, "a session this old ends")
	fs.IntVar(&cfg.maxTasks, "max-tasks", server.DefaultMaxTasks, "tasks kept at most (running, or done until they expire)")
	fs.IntVar(&cfg.maxTasksPerConn, "max-tasks-per-connection", server.DefaultMaxTasksPerConnection, "tasks one connection keeps at most")
	fs.DurationVar(&cfg.taskRetention, "task-retention", server.DefaultTaskRetention, "how long a task's result is kept after its call's time is up")
	fs.Var(&cfg.redactValues, "redact-value", "a secret value to redact from all output (repeatable; comma-separated in PYBOX_REDACT_VALUE)")
	fs.Var(&cfg.redactPatterns, "redact-pattern", "KIND=REGEX: redact what REGEX matches as [REDACTED:KIND] (repeatable); a group named secret narrows it")
	fs.Var(&cfg.redactDisable, "redact-disable", "a redaction rule to turn off: a pybox kind or a gitleaks rule id, or gitleaks for all of them (repeatable)")
	fs.StringVar(&cfg.redactFile, "redact-file", "", `JSON file of {"values": [...], "patterns": [{"kind", "regex"}], "disable": [...]}`)
	fs.IntVar(&cfg.redactDecodeDepth, "redact-decode-depth", redact.DefaultDecodeDepth, "decoding passes (base64, hex, percent) before gitleaks' rules; 0 for none")
	return fs
}

// envName is the variable twin of a flag.
func envName(flagName string) string {
	return "PYBOX_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse applies PYBOX_* variables, then the command line, which wins.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok || envErr != nil {
			return
		}
		vals := []string{v}
		if _, list := f.Value.(*stringList); list {
			// Comma-separated; an empty variable is an empty list.
			vals = nil
			for _, one := range strings.Split(v, ",") {
				if strings.TrimSpace(one) != "" {
					vals = append(vals, one)
				}
			}
		}
		for _, one := range vals {
			if err := fs.Set(f.Name, one); err != nil {
				envErr = fmt.Errorf("%s=%q: %v", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		fmt.Fprintln(stderr, "pybox:", envErr)
		return envErr
	}
	return fs.Parse(args)
}

// usage prints a command's flags with their variables and defaults.
func usage(fs *flag.FlagSet, w io.Writer, head string) {
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, "\nFlags (each also read from the PYBOX_<FLAG> variable; a flag wins):")
	fs.VisitAll(func(f *flag.Flag) {
		def := f.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  --%s\n        %s\n        (env %s, default %s)\n", f.Name, f.Usage, envName(f.Name), def)
	})
}

func (c *config) sandboxOptions(rd *redact.Redactor) sandbox.Options {
	rt := c.runtime
	if rt == "runc" {
		rt = "" // the engine's default, which is runc unless configured otherwise
	}
	var kube *sandbox.KubeOptions
	if c.backend == "kubernetes" {
		kube = &sandbox.KubeOptions{
			Kubeconfig:       c.kubeconfig,
			Namespace:        c.namespace,
			RuntimeClass:     c.runtimeClass,
			NodeSelector:     c.nodeSelectorMap(),
			Tolerations:      c.tolerations,
			NetworkPolicy:    c.networkPolicy,
			SeccompLocalhost: c.seccompLocalhost,
			ImagePullPolicy:  c.imagePullPolicy,
		}
	}
	return sandbox.Options{
		Kubernetes:         kube,
		Image:              c.image,
		Runtime:            rt,
		MemoryBytes:        int64(c.memory),
		NanoCPUs:           int64(c.cpus * 1e9),
		PidsLimit:          c.pids,
		TmpfsBytes:         int64(c.tmpfsSize),
		Network:            c.network,
		WritableRoot:       !c.readOnly,
		User:               c.user,
		UIDBase:            c.uidBase,
		UIDCount:           c.uidCount,
		AllowRoot:          c.allowRoot,
		KeepCapabilities:   !c.capDropAll,
		AllowNewPrivileges: !c.noNewPrivs,
		Seccomp:            c.seccomp,
		LogDriver:          c.logDriver,
		MaxConcurrent:      c.maxConcurrent,
		MaxQueue:           queueOption(c.maxQueue),
		QueueTimeout:       c.queueTimeout,
		OutputLimit:        int(c.outputLimit),
		Redact:             rd,
		MaxInputBytes:      int(c.maxInputBytes),
		MaxInputFileBytes:  int(c.maxInputFileBytes),
		MaxOutputFiles:     c.maxOutputFiles,
		MaxOutputFileBytes: int(c.maxOutputFileBytes),
		MaxOutputBytes:     int(c.maxOutputBytes),
		PoolSize:           c.pool,
		PoolMax:            c.poolMax,
		PoolParallel:       c.poolParallel,
		PreImport:          c.preImportList(),
		PoolMaxIdle:        c.poolMaxIdle,
		SessionMaxAge:      c.sessionMaxAge,
		ReconcileInterval:  c.reconcileInterval,
	}
}

// runtimeName is what runs the sandboxes' code: the Docker engine's OCI
// runtime, or the pods' RuntimeClass ("" for the cluster's default).
func (c *config) runtimeName() string {
	if c.backend == "kubernetes" {
		return c.runtimeClass
	}
	return c.runtime
}

// nodeSelectorMap is --node-selector as a map.
func (c *config) nodeSelectorMap() map[string]string {
	if len(c.nodeSelector) == 0 {
		return nil
	}
	m := map[string]string{}
	for _, kv := range c.nodeSelector {
		k, v, _ := strings.Cut(kv, "=")
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m
}

// preImportList is nil (the default list) unless modules were named.
func (c *config) preImportList() []string {
	var out []string
	for _, m := range c.preImport {
		for _, part := range strings.Split(m, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// queueOption maps the flag's 0 (no queue) to the option's -1.
func queueOption(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func (c *config) validate() error {
	switch {
	case c.timeout <= 0:
		return fmt.Errorf("--timeout must be positive")
	case c.maxTimeout < c.timeout:
		return fmt.Errorf("--max-timeout (%s) is below --timeout (%s)", c.maxTimeout, c.timeout)
	case c.cpus <= 0:
		return fmt.Errorf("--cpus must be positive")
	case c.pids <= 0:
		return fmt.Errorf("--pids must be positive")
	case c.maxConcurrent <= 0:
		return fmt.Errorf("--max-concurrent must be positive")
	case c.maxQueue < 0:
		return fmt.Errorf("--max-queue must not be negative")
	case c.outputLimit < 1024:
		return fmt.Errorf("--output-limit must be at least 1KiB")
	case c.pool < 0:
		return fmt.Errorf("--pool must not be negative")
	case c.poolMax < 0 || c.poolParallel < 0:
		return fmt.Errorf("--pool-max and --pool-parallel must not be negative")
	case c.maxSessions <= 0 || c.sessionIdle <= 0 || c.sessionMaxAge <= 0:
		return fmt.Errorf("the session limits must be positive")
	case c.maxTasks <= 0 || c.maxTasksPerConn <= 0 || c.taskRetention <= 0:
		return fmt.Errorf("the task limits must be positive")
	case c.backend != "docker" && c.backend != "kubernetes":
		return fmt.Errorf("--backend %q: give docker or kubernetes", c.backend)
	case c.networkPolicy != "create" && c.networkPolicy != "require" && c.networkPolicy != "off":
		return fmt.Errorf("--network-policy %q: give create, require or off", c.networkPolicy)
	case c.imagePullPolicy != "IfNotPresent" && c.imagePullPolicy != "Never" && c.imagePullPolicy != "Always":
		return fmt.Errorf("--image-pull-policy %q: give IfNotPresent, Never or Always", c.imagePullPolicy)
	case c.backend == "kubernetes" && c.runtime != "runc":
		return fmt.Errorf("--runtime is the Docker engine's; with --backend kubernetes, choose gVisor with --runtime-class (such as gvisor)")
	case c.reconcileInterval <= 0:
		return fmt.Errorf("--reconcile-interval must be positive")
	case c.maxOutputFiles <= 0 || c.maxInputBytes <= 0 || c.maxInputFileBytes <= 0 || c.maxOutputFileBytes <= 0 || c.maxOutputBytes <= 0:
		return fmt.Errorf("the file limits must be positive")
	}
	first, last, ok := strings.Cut(c.uidRange, "-")
	lo, err1 := strconv.Atoi(strings.TrimSpace(first))
	hi, err2 := strconv.Atoi(strings.TrimSpace(last))
	if !ok || err1 != nil || err2 != nil || hi < lo {
		return fmt.Errorf("--uid-range %q: give FIRST-LAST, such as 2000000000-2000999999", c.uidRange)
	}
	c.uidBase, c.uidCount = lo, hi-lo+1
	var err error
	if c.tokens, err = parseAuthTokens(c.authTokens); err != nil {
		return err
	}
	if c.origins, err = parseOrigins(c.allowedOrigins); err != nil {
		return err
	}
	if c.maxRequestBytes == byteSize(defaultMaxRequestBytes(sandbox.DefaultMaxInputBytes)) {
		c.maxRequestBytes = byteSize(defaultMaxRequestBytes(int64(c.maxInputBytes)))
	}
	return nil
}

// defaultMaxRequestBytes is a little above the largest valid call: the
// code at its limit, twice over for JSON escapes, the input files in
// base64, and a MiB for the rest of the JSON.
func defaultMaxRequestBytes(maxInput int64) int64 {
	return 2*sandbox.MaxCodeBytes + (maxInput+2)/3*4 + 1<<20
}

func (c *config) redactor() (*redact.Redactor, error) {
	opt := redact.Options{
		Values:      c.redactValues,
		Environ:     os.Environ(),
		Disable:     c.redactDisable,
		DecodeDepth: c.redactDecodeDepth,
	}
	if c.redactDecodeDepth == 0 {
		opt.DecodeDepth = -1 // the flag's 0 means no decoding
	}
	if tokens, err := parseAuthTokens(c.authTokens); err == nil {
		for _, t := range tokens {
			opt.Values = append(opt.Values, t.token) // a token given as a flag is no less secret
		}
	}
	for _, p := range c.redactPatterns {
		kind, re, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("--redact-pattern %q: want KIND=REGEX", p)
		}
		opt.Patterns = append(opt.Patterns, redact.Pattern{Kind: kind, Regex: re})
	}
	if c.redactFile != "" {
		if err := redact.LoadFile(c.redactFile, &opt); err != nil {
			return nil, fmt.Errorf("--redact-file: %w", err)
		}
	}
	return redact.New(opt)
}

func (c *config) serverOptions(sb *sandbox.Sandbox, rd *redact.Redactor, log zerolog.Logger) server.Options {
	return server.Options{
		Runner:                sb,
		Redactor:              rd,
		Logger:                log,
		DefaultTimeout:        c.timeout,
		MaxTimeout:            c.maxTimeout,
		Version:               version(),
		MaxSessions:           c.maxSessions,
		SessionIdle:           c.sessionIdle,
		SessionMaxAge:         c.sessionMaxAge,
		MaxTasks:              c.maxTasks,
		MaxTasksPerConnection: c.maxTasksPerConn,
		TaskRetention:         c.taskRetention,
		Limits: server.Limits{
			MemoryMiB:   int64(c.memory) >> 20,
			CPUs:        c.cpus,
			OutputBytes: int(c.outputLimit),
			Network:     c.network,
		},
	}
}

// logging builds the redactor and the logger that passes through it.
func (c *config) logging(stderr io.Writer) (*redact.Redactor, zerolog.Logger, error) {
	rd, err := c.redactor()
	if err != nil {
		return nil, zerolog.Nop(), err
	}
	logger, err := c.newLogger(stderr, rd)
	return rd, logger, err
}

// newLogger logs to stderr only: stdout is the protocol in stdio mode.
// Every message passes through the redactor.
func (c *config) newLogger(stderr io.Writer, rd *redact.Redactor) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(c.logLevel)
	if err != nil || c.logLevel == "" {
		return zerolog.Nop(), fmt.Errorf("--log-level %q: use debug, info, warn or error", c.logLevel)
	}
	var w io.Writer = redactingWriter{w: stderr, r: rd}
	format := c.logFormat
	if format == "auto" {
		format = "json"
		if f, ok := stderr.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				format = "console"
			}
		}
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format %q: use json, console or auto", c.logFormat)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// redactingWriter redacts each log line before it leaves.
type redactingWriter struct {
	w io.Writer
	r *redact.Redactor
}

func (rw redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(rw.w, rw.r.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
