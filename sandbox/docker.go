package sandbox

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
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"
)

// This file is the only one that imports the Docker module: the rest of the
// package speaks to the engine through the interfaces of engine.go, in the
// package's own types.

type dockerEngine struct {
	cli *client.Client

	mu sync.Mutex
	// flavor is what serves the Docker API: "" until known, "docker", or
	// "podman" (whose compatible API differs in a few places; see adapt).
	flavor string
	// seccompDir and seccompFile are where the profile was written for an
	// engine that reads seccomp= as a file path.
	seccompDir, seccompFile string
}

// newDockerEngine returns an engine for the Docker client configuration of
// the environment (DOCKER_HOST and friends). It does not contact the engine.
func newDockerEngine() (*dockerEngine, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return &dockerEngine{cli: cli}, nil
}

func (d *dockerEngine) Host() string { return d.cli.DaemonHost() }

// kind says what serves the API, asking once.
func (d *dockerEngine) kind(ctx context.Context) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.flavor != "" {
		return d.flavor, nil
	}
	v, err := d.cli.ServerVersion(ctx)
	if err != nil {
		return "", err
	}
	d.flavor = "docker"
	for _, c := range v.Components {
		if strings.HasPrefix(c.Name, "Podman") {
			d.flavor = "podman"
		}
	}
	return d.flavor, nil
}

// podmanNProc is the process limit pybox sets under Podman, which otherwise
// sets 4194304 and fails where root may not raise its own limits that far.
// The cgroup's pids limit stays the wall per sandbox.
const podmanNProc = 4096

// adapt rewrites a spec for Podman's Docker-compatible API, which reads
// seccomp= as a path on the engine's host rather than the profile itself,
// refuses uid= and gid= among tmpfs options, and sets a process limit of
// its own unless given one.
func (d *dockerEngine) adapt(s containerSpec) (containerSpec, error) {
	if s.NProc == 0 {
		s.NProc = podmanNProc
	}
	if s.Seccomp != "" && s.Seccomp != "unconfined" {
		path, err := d.profileFile(s.Seccomp)
		if err != nil {
			return s, err
		}
		s.Seccomp = path
	}
	tmpfs := make(map[string]string, len(s.Tmpfs))
	for dir, opts := range s.Tmpfs {
		// The runner opens a root-owned /mnt/outputs to the worker.
		var kept []string
		for _, o := range strings.Split(opts, ",") {
			if !strings.HasPrefix(o, "uid=") && !strings.HasPrefix(o, "gid=") {
				kept = append(kept, o)
			}
		}
		tmpfs[dir] = strings.Join(kept, ",")
	}
	s.Tmpfs = tmpfs
	return s, nil
}

// profileFile writes a seccomp profile where a local engine can read it and
// returns the path: a file in a directory of this process's own with a
// random name (0711), so no other local user can put a profile of theirs in
// its place, and an engine that does not share this host's files finds
// nothing rather than someone else's file.
func (d *dockerEngine) profileFile(profile string) (string, error) {
	if !strings.HasPrefix(d.cli.DaemonHost(), "unix://") {
		return "", fmt.Errorf("this engine (%s) reads a seccomp profile from a file on its own host, which pybox cannot write to from here; run pybox on the engine's host, or use Docker", d.cli.DaemonHost())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	sum := sha256.Sum256([]byte(profile))
	name := hex.EncodeToString(sum[:8]) + ".json"
	// Only this process (or root) can write in its directory: a file of the
	// profile's name still there is the one written.
	if d.seccompFile != "" && filepath.Base(d.seccompFile) == name {
		if _, err := os.Stat(d.seccompFile); err == nil {
			return d.seccompFile, nil
		}
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("writing the seccomp profile for the engine: %w", err)
	}
	if d.seccompDir != "" {
		if _, err := os.Stat(d.seccompDir); err != nil {
			d.seccompDir = "" // removed under us (a temporary-file cleaner): make another
		}
	}
	if d.seccompDir == "" {
		dir, err := os.MkdirTemp("", "pybox-seccomp-")
		if err != nil {
			return fail(err)
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			os.RemoveAll(dir)
			return fail(err)
		}
		d.seccompDir = dir
	}
	path := filepath.Join(d.seccompDir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fail(err)
	}
	if _, err := f.WriteString(profile); err != nil {
		f.Close()
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	d.seccompFile = path
	return path, nil
}

// Close removes what the engine wrote on this host (the seccomp profile).
func (d *dockerEngine) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seccompDir == "" {
		return nil
	}
	err := os.RemoveAll(d.seccompDir)
	d.seccompDir, d.seccompFile = "", ""
	return err
}

func (d *dockerEngine) Create(ctx context.Context, s containerSpec) (string, error) {
	kind, err := d.kind(ctx)
	if err != nil {
		return "", err
	}
	if kind == "podman" {
		if s, err = d.adapt(s); err != nil {
			return "", err
		}
	}
	cfg := &container.Config{
		Image:        s.Image,
		Cmd:          s.Cmd,
		Env:          s.Env,
		User:         s.User,
		WorkingDir:   s.WorkingDir,
		Labels:       s.Labels,
		Hostname:     s.Hostname,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		OpenStdin:    true,
		// The runner's stdin closes when the server's attach ends, which
		// ends the runner, and AutoRemove the container: a sandbox never
		// outlives its server for long, even one killed with SIGKILL.
		StdinOnce:       true,
		NetworkDisabled: !s.Network,
		// The runner ignores SIGTERM: `docker stop` and the engine's own
		// shutdown need not wait 10 s for it before they kill.
		StopTimeout: &stopTimeout,
	}
	pids := s.PidsLimit
	swappiness := int64(0)
	host := &container.HostConfig{
		AutoRemove:     true,
		Runtime:        s.Runtime,
		ReadonlyRootfs: s.ReadOnly,
		Tmpfs:          s.Tmpfs,
		ShmSize:        s.ShmBytes,
		LogConfig:      container.LogConfig{Type: s.LogDriver},
		IpcMode:        "private",
		OomScoreAdj:    1000,
		Resources: container.Resources{
			Memory:           s.MemoryBytes,
			MemorySwap:       s.MemoryBytes, // equal to Memory: no swap
			MemorySwappiness: &swappiness,
			NanoCPUs:         s.NanoCPUs,
			PidsLimit:        &pids,
		},
	}
	if s.NoFile > 0 {
		host.Resources.Ulimits = append(host.Resources.Ulimits,
			&container.Ulimit{Name: "nofile", Soft: s.NoFile, Hard: s.NoFile},
			&container.Ulimit{Name: "core", Soft: 0, Hard: 0})
	}
	if s.NProc > 0 {
		host.Resources.Ulimits = append(host.Resources.Ulimits, &container.Ulimit{Name: "nproc", Soft: s.NProc, Hard: s.NProc})
	}
	if !s.Network {
		host.NetworkMode = "none"
	}
	if s.NetworkMode != "" {
		host.NetworkMode = container.NetworkMode(s.NetworkMode)
		cfg.NetworkDisabled = false
	}
	if s.CapDropAll {
		host.CapDrop = []string{"ALL"}
	}
	if s.NoNewPrivs {
		host.SecurityOpt = append(host.SecurityOpt, "no-new-privileges:true")
	}
	if s.Seccomp != "" {
		host.SecurityOpt = append(host.SecurityOpt, "seccomp="+s.Seccomp)
	}
	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, "")
	if err != nil {
		if errdefs.IsNotFound(err) {
			return "", fmt.Errorf("%w: %s", errImageMissing, s.Image)
		}
		return "", err
	}
	if kind == "podman" && s.Runtime != "" && s.Runtime != "runc" {
		// Podman's compatible API ignores HostConfig.Runtime (4.3 runs its
		// default instead): never let a request for gVisor run under runc.
		rt, err := d.podmanRuntime(ctx, resp.ID)
		if err == nil && rt != s.Runtime {
			err = fmt.Errorf("Podman's Docker-compatible API ignores the requested runtime %q and would run %q, so pybox will not run the code: use --runtime runc with Podman, or Docker for gVisor", s.Runtime, rt)
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			d.Remove(rctx, resp.ID)
			cancel()
			return "", err
		}
	}
	return resp.ID, nil
}

// stopTimeout is the seconds an engine waits after SIGTERM before SIGKILL.
var stopTimeout = 1

// podmanRuntime asks Podman's own API which OCI runtime a container has.
func (d *dockerEngine) podmanRuntime(ctx context.Context, id string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://podman/v4.0.0/libpod/containers/"+url.PathEscape(id)+"/json", nil)
	if err != nil {
		return "", err
	}
	resp, err := d.cli.HTTPClient().Do(req)
	if err != nil {
		return "", fmt.Errorf("asking Podman for the container's runtime: %w", err)
	}
	defer resp.Body.Close()
	var c struct{ OCIRuntime string }
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&c); err != nil || resp.StatusCode != http.StatusOK || c.OCIRuntime == "" {
		return "", fmt.Errorf("asking Podman for the container's runtime: status %d, %v", resp.StatusCode, err)
	}
	return c.OCIRuntime, nil
}

type dockerStream struct {
	conn io.Writer
	hr   interface{ Close() }
	r    io.Reader
}

func (s *dockerStream) Stdin() io.Writer { return s.conn }
func (s *dockerStream) Close() error     { s.hr.Close(); return nil }
func (s *dockerStream) Demux(stdout, stderr io.Writer) error {
	_, err := stdcopy.StdCopy(stdout, stderr, s.r)
	return err
}

func (d *dockerEngine) attach(ctx context.Context, id string) (stream, error) {
	hr, err := d.cli.ContainerAttach(ctx, id, container.AttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return nil, err
	}
	return &dockerStream{conn: hr.Conn, hr: &hr, r: hr.Reader}, nil
}

func (d *dockerEngine) Launch(ctx context.Context, id string) (stream, error) {
	kind, err := d.kind(ctx)
	if err != nil {
		return nil, err
	}
	if kind == "podman" {
		// Podman answers 409 to an attach before the start.
		if err := d.Start(ctx, id); err != nil {
			return nil, err
		}
		return d.attach(ctx, id)
	}
	st, err := d.attach(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx, id); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// Start starts a created container.
func (d *dockerEngine) Start(ctx context.Context, id string) error {
	return d.cli.ContainerStart(ctx, id, container.StartOptions{})
}

func (d *dockerEngine) Kill(ctx context.Context, id string) error {
	err := d.cli.ContainerKill(ctx, id, "KILL")
	if err != nil && (errdefs.IsNotFound(err) || errdefs.IsConflict(err) || strings.Contains(err.Error(), "is not running")) {
		return nil
	}
	return err
}

func (d *dockerEngine) Wait(ctx context.Context, id string) (int, error) {
	okc, errc := d.cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case r := <-okc:
		if r.Error != nil && r.Error.Message != "" {
			return int(r.StatusCode), errors.New(r.Error.Message)
		}
		return int(r.StatusCode), nil
	case err := <-errc:
		return -1, err
	}
}

func (d *dockerEngine) Inspect(ctx context.Context, id string) (containerState, error) {
	c, raw, err := d.cli.ContainerInspectWithRaw(ctx, id, false)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return containerState{}, fmt.Errorf("%w: %v", errGone, err)
		}
		return containerState{}, err
	}
	st := containerState{Raw: raw}
	if c.State != nil {
		st.Running = c.State.Running
		st.ExitCode = c.State.ExitCode
		st.OOMKilled = c.State.OOMKilled
		st.Removing = c.State.Status == "removing" || c.State.Dead
		st.Paused = c.State.Paused
	}
	return st, nil
}

// History reads the engine's events for the container since a time,
// until its "die" (and, with AutoRemove, "destroy") events or ctx's end:
// an auto-removed container can no longer be inspected.
func (d *dockerEngine) History(ctx context.Context, id string, since time.Time) (containerHistory, error) {
	args := filters.NewArgs(filters.Arg("type", "container"), filters.Arg("container", id))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, errs := d.cli.Events(ctx, events.ListOptions{Since: fmt.Sprintf("%d.%09d", since.Add(-time.Second).Unix(), since.Nanosecond()), Filters: args})
	var h containerHistory
	for {
		select {
		case m := <-msgs:
			switch m.Action {
			case "kill":
				n, err := strconv.Atoi(m.Actor.Attributes["signal"])
				if err != nil {
					n = int(syscall.SIGKILL)
				}
				h.Kills = append(h.Kills, n)
			case "oom":
				h.OOM = true
			case "die", "died":
				h.Died = true
				h.ExitCode, _ = strconv.Atoi(m.Actor.Attributes["exitCode"])
				if h.ExitCode == 0 {
					h.ExitCode, _ = strconv.Atoi(m.Actor.Attributes["containerExitCode"]) // Podman
				}
			case "destroy", "remove":
				h.Removed = true
				return h, nil
			}
		case err := <-errs:
			if err == nil || errors.Is(err, io.EOF) {
				return h, nil
			}
			if h.Died && errors.Is(err, context.DeadlineExceeded) {
				return h, nil // died, not (yet) removed
			}
			return h, err
		}
	}
}

func (d *dockerEngine) Remove(ctx context.Context, id string) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err == nil || errdefs.IsNotFound(err) || strings.Contains(err.Error(), "is already in progress") {
			return nil
		}
		// Podman may refuse while the container is still stopping ("container
		// state improper"): gone is gone, otherwise try again shortly.
		if _, ierr := d.cli.ContainerInspect(ctx, id); errdefs.IsNotFound(ierr) {
			return nil
		}
		if attempt == 5 || !(errdefs.IsConflict(err) || strings.Contains(err.Error(), "state improper")) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

func (d *dockerEngine) List(ctx context.Context, labels map[string]string) ([]listedContainer, error) {
	args := filters.NewArgs()
	for k, v := range labels {
		args.Add("label", k+"="+v)
	}
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, err
	}
	out := make([]listedContainer, 0, len(cs))
	for _, c := range cs {
		out = append(out, listedContainer{ID: c.ID, Labels: c.Labels, State: c.State, Created: time.Unix(c.Created, 0)})
	}
	return out, nil
}

func (d *dockerEngine) Ping(ctx context.Context) (string, error) {
	p, err := d.cli.Ping(ctx)
	if err != nil {
		return "", err
	}
	if p.APIVersion == "" {
		return "", errors.New("engine answered without an API version")
	}
	d.cli.NegotiateAPIVersionPing(p)
	return p.APIVersion, nil
}

func (d *dockerEngine) ImageInspect(ctx context.Context, ref string) (imageInfo, error) {
	img, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return imageInfo{}, fmt.Errorf("%w: %s", errImageMissing, ref)
		}
		return imageInfo{}, err
	}
	info := imageInfo{ID: img.ID, Size: img.Size}
	if img.Config != nil {
		info.Labels = img.Config.Labels
	}
	return info, nil
}

func (d *dockerEngine) ImageImport(ctx context.Context, tar io.Reader, ref string, changes []string) error {
	rc, err := d.cli.ImageImport(ctx, image.ImportSource{Source: tar, SourceName: "-"}, ref, image.ImportOptions{Changes: changes})
	if err != nil {
		return err
	}
	defer rc.Close()
	// The engine reports progress and errors as a JSON message stream.
	dec := json.NewDecoder(rc)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading import progress: %w", err)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

func (d *dockerEngine) ServerInfo(ctx context.Context) (EngineInfo, error) {
	info, err := d.cli.Info(ctx)
	if err != nil {
		return EngineInfo{}, err
	}
	v, err := d.cli.ServerVersion(ctx)
	if err != nil {
		return EngineInfo{}, err
	}
	ei := EngineInfo{
		ServerVersion:   info.ServerVersion,
		APIVersion:      v.APIVersion,
		OS:              info.OperatingSystem,
		DefaultRT:       info.DefaultRuntime,
		CgroupVersion:   info.CgroupVersion,
		RuncVersion:     info.RuncCommit.ID,
		SecurityOptions: info.SecurityOptions,
	}
	for name := range info.Runtimes {
		ei.Runtimes = append(ei.Runtimes, name)
	}
	ei.Product = "Docker Engine"
	for _, c := range v.Components {
		switch {
		case strings.EqualFold(c.Name, "runc"):
			ei.RuncVersion = c.Version
		case strings.HasPrefix(c.Name, "Podman"):
			ei.Product = "Podman"
		case c.Name == "OCI Runtime (runc)":
			// "runc version 1.1.5+ds1\ncommit: ..."
			if f := strings.Fields(c.Version); len(f) >= 3 && f[1] == "version" {
				ei.RuncVersion = f[2]
			}
		}
	}
	return ei, nil
}

// isUnavailable reports whether err means the engine could not be reached
// at all, as opposed to refusing one request.
func isUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if client.IsErrConnectionFailed(err) {
		return true
	}
	if errdefs.IsSystem(err) || errdefs.IsInvalidParameter(err) || errdefs.IsConflict(err) || errdefs.IsNotFound(err) || errdefs.IsForbidden(err) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// A message from the engine itself ("no such file" about a binary of
	// its own, say) is a refusal, not an absence: only the client's own
	// words about the connection count here.
	msg := err.Error()
	return strings.Contains(msg, "Cannot connect to the Docker daemon") ||
		strings.Contains(msg, "error during connect")
}
