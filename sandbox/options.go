package sandbox

import (
	_ "embed"
	"fmt"
	"os"
	"time"
)

// The sandbox's defaults. Every one is an [Options] field whose zero value
// selects it, and a flag of the pybox command.
const (
	// ImageVersion is bumped whenever the image's content or layout changes.
	ImageVersion = "2"
	// DefaultImage is the sandbox image the server expects.
	DefaultImage = "pybox-sandbox:" + ImageVersion

	DefaultMemoryBytes = 256 << 20
	DefaultNanoCPUs    = 1_000_000_000
	DefaultPidsLimit   = 64
	DefaultTmpfsBytes  = 64 << 20
	DefaultShmBytes    = 16 << 20
	// DefaultUser gives each sandbox a uid of its own from the uid range.
	DefaultUser = "auto"
	// DefaultUIDBase and DefaultUIDCount are the uid range: high above
	// the ids of users and of the usual subordinate-id ranges, and below
	// 2^31 so no tool reads them as negative.
	DefaultUIDBase       = 2_000_000_000
	DefaultUIDCount      = 1_000_000
	DefaultMaxConcurrent = 4
	DefaultMaxQueue      = 64
	DefaultQueueTimeout  = 60 * time.Second
	DefaultOutputLimit   = 64 << 10
	DefaultTimeout       = 30 * time.Second
	DefaultNoFile        = 1024

	// MaxCodeBytes bounds the source of one call.
	MaxCodeBytes = 1 << 20

	DefaultMaxInputBytes      = 10 << 20
	DefaultMaxInputFileBytes  = 10 << 20
	DefaultMaxInputFiles      = 100
	DefaultMaxOutputFiles     = 50
	DefaultMaxOutputFileBytes = 10 << 20
	DefaultMaxOutputBytes     = 20 << 20
	DefaultOutputsTmpfsBytes  = 64 << 20

	// LabelManaged marks every container pybox creates.
	LabelManaged = "pybox.managed"
	// LabelOwner names the server process that owns a container, so that a
	// later server can tell an orphan from a live neighbour's container.
	LabelOwner = "pybox.owner"
	// LabelCall carries the call's id.
	LabelCall = "pybox.call"

	// workDir is the code's working directory.
	workDir = "/tmp"

	// engineCallTimeout bounds each engine request apart from the run itself.
	engineCallTimeout = 30 * time.Second
	// cleanupTimeout bounds a container's removal, which runs even when the
	// caller has gone.
	cleanupTimeout = 20 * time.Second
	// killGrace is how long output may still arrive after a kill.
	killGrace = 2 * time.Second
)

// Seccomp profile selectors for [Options.Seccomp].
const (
	// SeccompPinned is the profile pybox ships, moby's current default.
	SeccompPinned = "pinned"
	// SeccompEngine leaves the choice to the engine's built-in default.
	SeccompEngine = "engine"
	// SeccompUnconfined turns seccomp off. Never use it for untrusted code.
	SeccompUnconfined = "unconfined"
)

// pinnedSeccomp is the default profile of github.com/moby/profiles/seccomp
// v0.3.0. Docker 20.10's built-in profile allows AF_VSOCK and io_uring;
// this one denies both.
//
//go:embed seccomp.json
var pinnedSeccomp string

// Options configures a [Sandbox]. The zero value of every field is the
// hardened default; set a field only to loosen or tighten it on purpose.
type Options struct {
	// Kubernetes, when set, runs each sandbox as a pod of a cluster
	// instead of a container of the Docker engine.
	Kubernetes *KubeOptions
	// Image is the sandbox image; "" means [DefaultImage].
	Image string
	// Runtime is the OCI runtime ("runc", "runsc"); "" means the engine's default.
	Runtime string
	// MemoryBytes is the memory limit, swap included; 0 means 256 MiB.
	MemoryBytes int64
	// NanoCPUs is the CPU quota in billionths of a CPU; 0 means 1 CPU.
	NanoCPUs int64
	// PidsLimit caps processes and threads; 0 means 64.
	PidsLimit int64
	// TmpfsBytes is the size of the /tmp tmpfs; 0 means 64 MiB.
	TmpfsBytes int64
	// Network, when true, gives the container the engine's default network.
	Network bool
	// WritableRoot, when true, leaves the root filesystem writable.
	WritableRoot bool
	// User is "uid:gid" to run every sandbox as; "" or "auto" gives each
	// live sandbox a uid of its own from the uid range. Root is refused
	// unless AllowRoot is set.
	User string
	// UIDBase and UIDCount are the uid range; 0 means [DefaultUIDBase]
	// and [DefaultUIDCount].
	UIDBase, UIDCount int
	// AllowRoot permits User to be root and KeepCapabilities: whatever
	// loosens the sandbox's privileges.
	AllowRoot bool
	// KeepCapabilities, when true, keeps the engine's default capabilities
	// (the sandbox's uid is not root, so they sit in its bounding set
	// only). It needs AllowRoot.
	KeepCapabilities bool
	// AllowNewPrivileges, when true, drops the no-new-privileges flag.
	AllowNewPrivileges bool
	// Seccomp is [SeccompPinned] (""), [SeccompEngine], [SeccompUnconfined],
	// or the path of a JSON profile.
	Seccomp string
	// LogDriver is the engine's log driver for the container; "" means "none".
	LogDriver string
	// MaxConcurrent is how many containers may run at once; 0 means 4.
	MaxConcurrent int
	// MaxQueue is how many calls may wait for a slot; 0 means 64, -1 none.
	MaxQueue int
	// QueueTimeout is how long a call may wait for a slot; 0 means 60 s.
	QueueTimeout time.Duration
	// OutputLimit is the bytes kept per stream; 0 means 64 KiB.
	OutputLimit int
	// MaxInputBytes bounds the files of one call together; 0 means 10 MiB.
	MaxInputBytes int
	// MaxInputFileBytes bounds one input file; 0 means 10 MiB.
	MaxInputFileBytes int
	// MaxInputFiles bounds the number of input files; 0 means 100.
	MaxInputFiles int
	// MaxOutputFiles bounds the output files that come back; 0 means 50.
	MaxOutputFiles int
	// MaxOutputFileBytes bounds one output file; 0 means 10 MiB.
	MaxOutputFileBytes int
	// MaxOutputBytes bounds the output files together; 0 means 20 MiB.
	MaxOutputBytes int
	// OutputsTmpfsBytes is the size of /mnt/outputs; 0 means 64 MiB.
	OutputsTmpfsBytes int64
	// PoolSize is how many started sandboxes wait for calls; 0 means no
	// pool (every call starts its own).
	PoolSize int
	// PoolMax caps the pool's size as it follows demand: each call that
	// finds it empty raises it by one, and it falls back to PoolSize when
	// calls stop finding it empty. 0 means 4 × PoolSize; less than
	// PoolSize means PoolSize (a pool of fixed size).
	PoolMax int
	// PoolParallel is how many pooled sandboxes start at once; 0 means
	// one per CPU core.
	PoolParallel int
	// PreImport are the modules a pooled sandbox imports ahead of the
	// code; nil means [DefaultPreImport].
	PreImport []string
	// PoolMaxIdle replaces a pooled sandbox that waited this long; 0 means
	// 5 minutes.
	PoolMaxIdle time.Duration
	// SessionMaxAge is the longest a session's sandbox lives: its runner
	// ends it a little after, even when no server is left to; 0 means an
	// hour.
	SessionMaxAge time.Duration
	// ReconcileInterval is how often the reconciler removes what should
	// be gone (failed removals, orphans of dead servers); 0 means 30 s.
	ReconcileInterval time.Duration
	// Redact, when set, redacts everything of a call that leaves: the
	// streams (before they are cut to OutputLimit, so a secret is never
	// cut in two at the truncation marker), output files' names and
	// contents, and pybox's own notes. It runs within the call's slot and
	// clock; what it cannot finish is withheld with a note.
	Redact Redactor
}

// resolved holds the options with every default filled in.
type resolved struct {
	Options
	seccomp   string
	fixedUser string // "uid:gid", or "" for the range
}

func (o Options) resolve() (resolved, error) {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.MemoryBytes == 0 {
		o.MemoryBytes = DefaultMemoryBytes
	}
	if o.NanoCPUs == 0 {
		o.NanoCPUs = DefaultNanoCPUs
	}
	if o.PidsLimit == 0 {
		o.PidsLimit = DefaultPidsLimit
	}
	if o.TmpfsBytes == 0 {
		o.TmpfsBytes = DefaultTmpfsBytes
	}
	if o.User == "" {
		o.User = DefaultUser
	}
	if o.UIDBase == 0 {
		o.UIDBase = DefaultUIDBase
	}
	if o.UIDCount == 0 {
		o.UIDCount = DefaultUIDCount
	}
	if o.LogDriver == "" {
		o.LogDriver = "none"
	}
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	switch {
	case o.MaxQueue == 0:
		o.MaxQueue = DefaultMaxQueue
	case o.MaxQueue < 0:
		o.MaxQueue = 0
	}
	if o.QueueTimeout == 0 {
		o.QueueTimeout = DefaultQueueTimeout
	}
	if o.OutputLimit == 0 {
		o.OutputLimit = DefaultOutputLimit
	}
	for _, d := range []struct {
		v   *int
		def int
	}{
		{&o.MaxInputBytes, DefaultMaxInputBytes}, {&o.MaxInputFileBytes, DefaultMaxInputFileBytes},
		{&o.MaxInputFiles, DefaultMaxInputFiles}, {&o.MaxOutputFiles, DefaultMaxOutputFiles},
		{&o.MaxOutputFileBytes, DefaultMaxOutputFileBytes}, {&o.MaxOutputBytes, DefaultMaxOutputBytes},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.PreImport == nil {
		o.PreImport = DefaultPreImport
	}
	if o.PoolMax == 0 {
		o.PoolMax = 4 * o.PoolSize
	}
	o.PoolMax = max(o.PoolMax, o.PoolSize)
	if o.PoolParallel <= 0 {
		o.PoolParallel = defaultPoolParallel()
	}
	if o.PoolMaxIdle == 0 {
		o.PoolMaxIdle = DefaultPoolMaxIdle
	}
	if o.SessionMaxAge == 0 {
		o.SessionMaxAge = time.Hour
	}
	if o.ReconcileInterval == 0 {
		o.ReconcileInterval = DefaultReconcileInterval
	}
	if o.OutputsTmpfsBytes == 0 {
		o.OutputsTmpfsBytes = DefaultOutputsTmpfsBytes
	}
	switch {
	case o.MemoryBytes < 16<<20:
		return resolved{}, fmt.Errorf("memory limit %d bytes is below the 16 MiB Python needs", o.MemoryBytes)
	case o.NanoCPUs < 0, o.PidsLimit < 0, o.TmpfsBytes < 0, o.MaxConcurrent < 0, o.OutputLimit < 0:
		return resolved{}, fmt.Errorf("limits must not be negative")
	}
	fixed, root, err := parseUser(o.User)
	switch {
	case err != nil:
		return resolved{}, err
	case root && !o.AllowRoot:
		return resolved{}, fmt.Errorf("user %q is root; set AllowRoot (--allow-root) to permit it", o.User)
	case o.KeepCapabilities && !o.AllowRoot:
		return resolved{}, fmt.Errorf("keeping the engine's capabilities loosens the sandbox; set AllowRoot (--allow-root) to permit it")
	case o.UIDBase < 1000 || o.UIDCount < 1 || int64(o.UIDBase)+int64(o.UIDCount) > 1<<32-2:
		return resolved{}, fmt.Errorf("the uid range %d-%d is not usable: start above 999 and stay below 4294967294", o.UIDBase, o.UIDBase+o.UIDCount-1)
	}
	r := resolved{Options: o, fixedUser: fixed}
	switch o.Seccomp {
	case "", SeccompPinned:
		r.seccomp = pinnedSeccomp
	case SeccompEngine:
		r.seccomp = ""
	case SeccompUnconfined:
		r.seccomp = "unconfined"
	default:
		b, err := os.ReadFile(o.Seccomp)
		if err != nil {
			return resolved{}, fmt.Errorf("seccomp profile: %w", err)
		}
		r.seccomp = string(b)
	}
	return r, nil
}

// containerEnv is the whole environment of the code: nothing of the
// server's own environment goes in.
func containerEnv() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + workDir,
		"LANG=C.UTF-8",
		"LC_ALL=C.UTF-8",
		// The sandbox's uid has no entry in /etc/passwd; these name it
		// for getpass.getuser() and the like.
		"USER=sandbox",
		"LOGNAME=sandbox",
		"MPLBACKEND=module://pybox_backend",
		"MPLCONFIGDIR=/tmp/.config/matplotlib",
		"OPENBLAS_NUM_THREADS=1",
		"OMP_NUM_THREADS=1",
		"MKL_NUM_THREADS=1",
	}
}
