package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"
)

// The engine as each part of the package uses it, each interface holding
// only what its consumer calls (as nomad's docker driver splits its
// client). docker.go implements them all for Docker's API; tests fake the
// ones they need.

// containers is what the execution path asks of an engine: one sandbox's
// life, from creation to removal.
type containers interface {
	// Create makes a stopped container from spec and returns its id.
	Create(ctx context.Context, spec containerSpec) (string, error)
	// Launch starts the container with its stdin, stdout and stderr
	// attached. Engines differ in the order they allow (Docker attaches
	// before the start, Podman only after it), so the runner writes nothing
	// until it reads its configuration from stdin: nothing is missed either way.
	Launch(ctx context.Context, id string) (stream, error)
	Kill(ctx context.Context, id string) error
	// Wait blocks until the container is not running.
	Wait(ctx context.Context, id string) (exitCode int, err error)
	Inspect(ctx context.Context, id string) (containerState, error)
	// History returns what the engine says happened to the container since
	// a time, waiting for its end until ctx's deadline.
	History(ctx context.Context, id string, since time.Time) (containerHistory, error)
	// Remove removes the container, killing it first; a container that is
	// already gone is no error.
	Remove(ctx context.Context, id string) error
	// Host names where the client looks for the engine, for messages.
	Host() string
}

// lister is what cleanup asks of an engine.
type lister interface {
	// List returns the containers, running or not, that carry all labels.
	List(ctx context.Context, labels map[string]string) ([]listedContainer, error)
	Remove(ctx context.Context, id string) error
}

// prober is what the checks ask of an engine.
type prober interface {
	Ping(ctx context.Context) (string, error)
	ServerInfo(ctx context.Context) (EngineInfo, error)
	// ImageInspect reports whether ref exists and its labels.
	ImageInspect(ctx context.Context, ref string) (imageInfo, error)
	Host() string
}

// importer is what the image build asks of an engine.
type importer interface {
	Ping(ctx context.Context) (string, error)
	ImageImport(ctx context.Context, tar io.Reader, ref string, changes []string) error
	Host() string
}

// stream is an attached container's standard streams.
type stream interface {
	// Stdin is the container's standard input.
	Stdin() io.Writer
	// Demux copies stdout and stderr until both are closed.
	Demux(stdout, stderr io.Writer) error
	Close() error
}

// containerSpec is everything needed to create one sandbox container.
type containerSpec struct {
	Image      string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
	Hostname   string
	Runtime    string
	Network    bool
	// NetworkMode, when set, overrides the mode Network selects (tests
	// use "host" for control runs).
	NetworkMode string
	MemoryBytes int64
	NanoCPUs    int64
	PidsLimit   int64
	ReadOnly    bool
	Tmpfs       map[string]string
	ShmBytes    int64
	CapDropAll  bool
	NoNewPrivs  bool
	// Seccomp is the profile's JSON, "unconfined", or "" for the engine's default.
	Seccomp   string
	LogDriver string
	NoFile    int64
	// NProc, when set, limits the processes of the code's uid (host-wide
	// without a user namespace; root is exempt).
	NProc int64
	// Persistent: the sandbox outlives an attach (a session's pod, which
	// any replica attaches to for a call); otherwise its runner's stdin
	// closes, and the runner ends, when the attach that started it does.
	Persistent bool
	// Lifetime is the longest the sandbox may live: an engine that can
	// enforce it itself (Kubernetes' activeDeadlineSeconds) ends it then,
	// even if pybox has died.
	Lifetime time.Duration
}

type containerState struct {
	Running   bool
	ExitCode  int
	OOMKilled bool
	// Removing: the engine is removing the container (`docker rm -f`).
	Removing bool
	// Paused: the container is frozen (`docker pause`).
	Paused bool
	// Raw is the engine's inspection, for posture checks in tests.
	Raw json.RawMessage
}

// containerHistory is the engine's account of a container's end.
type containerHistory struct {
	// Kills are the signals the engine was asked to send it (`docker
	// kill`, `docker stop`, `docker rm -f`, the engine's shutdown).
	Kills []int
	// OOM: its memory cgroup killed a process for memory.
	OOM bool
	// Died: its first process ended, with ExitCode.
	Died     bool
	ExitCode int
	// Removed: the container is gone.
	Removed bool
}

type listedContainer struct {
	ID      string
	Labels  map[string]string
	State   string
	Created time.Time
}

type imageInfo struct {
	ID     string
	Labels map[string]string
	Size   int64
	// NoLabels: the engine does not report the image's labels (a
	// cluster's nodes list only names and sizes).
	NoLabels bool
}

// EngineInfo is what the engine says about itself.
type EngineInfo struct {
	// Product is "Docker Engine" or "Podman".
	Product       string
	ServerVersion string
	APIVersion    string
	OS            string
	Runtimes      []string
	DefaultRT     string
	CgroupVersion string
	RuncVersion   string
	// Namespace is where a cluster's sandbox pods go.
	Namespace string
	// SecurityOptions are the engine's security features ("name=seccomp,...",
	// "name=userns", ...).
	SecurityOptions []string
}

// errImageMissing reports that the sandbox image is not present.
var errImageMissing = errors.New("image not found")

// errGone reports that a container no longer exists.
var errGone = errors.New("no such container")
