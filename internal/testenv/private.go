package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// PrivateEngine is a Docker engine a test binary starts for itself, beside
// the machine's: fault tests stop, freeze and restart it, and signal no
// process they did not start. It has its own data root, exec root and
// socket, no bridge and no iptables rules, so it puts no address on the
// host's interfaces; the sandboxes it runs have no network anyway.
type PrivateEngine struct {
	// Host is its socket, for DOCKER_HOST.
	Host string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	dirs [2]string // data root, exec root
	log  string
}

var (
	privateOnce sync.Once
	private     *PrivateEngine
	privateErr  error
)

// EngineControl reports whether tests may run engines of their own and stop
// them: as root, with PYBOX_TEST_ENGINE_CONTROL set (scripts/test.sh sets it).
func EngineControl() bool {
	return os.Getenv("PYBOX_TEST_ENGINE_CONTROL") != "" && os.Geteuid() == 0
}

// Private returns the test binary's own engine, started on first use with
// the sandbox image loaded from the machine's engine. Where engine control
// is not allowed it skips, or fails where engine tests are required.
func Private(t testing.TB, image string) *PrivateEngine {
	t.Helper()
	if !EngineControl() {
		if Required() && os.Geteuid() == 0 {
			t.Fatal("this fault test runs an engine of its own: set PYBOX_TEST_ENGINE_CONTROL=1 (scripts/test.sh does, as root)")
		}
		t.Skip("this fault test runs an engine of its own: it needs root and PYBOX_TEST_ENGINE_CONTROL=1 (set by scripts/test.sh)")
	}
	Engine(t, image) // the machine's engine, which holds the image
	privateOnce.Do(func() {
		base := "pybox-test-engine"
		private = &PrivateEngine{
			dirs: [2]string{filepath.Join("/var/lib", base), filepath.Join("/run", base)},
			log:  filepath.Join("/var/log", base+".log"),
		}
		private.Host = "unix://" + filepath.Join(private.dirs[1], "docker.sock")
		if privateErr = private.Start(); privateErr == nil {
			privateErr = private.load(image)
		}
	})
	if privateErr != nil {
		t.Fatalf("the test's own engine: %v (its log: %s)", privateErr, private.log)
	}
	return private
}

// ClosePrivate stops the test binary's own engine, if it started one.
func ClosePrivate() {
	if private != nil {
		private.Stop()
	}
}

// Start starts the engine, unless it runs, and waits until it answers.
func (e *PrivateEngine) Start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd != nil {
		return nil
	}
	for _, d := range e.dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	logf, err := os.OpenFile(e.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	sock := e.Host[len("unix://"):]
	os.Remove(sock)
	// A pid file of an engine that is gone would stop dockerd starting.
	pidfile := filepath.Join(e.dirs[1], "docker.pid")
	if b, err := os.ReadFile(pidfile); err == nil {
		var pid int
		if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
			os.Remove(pidfile)
		}
	}
	cmd := exec.Command("dockerd",
		"--data-root", e.dirs[0], "--exec-root", e.dirs[1],
		"--pidfile", filepath.Join(e.dirs[1], "docker.pid"), "-H", e.Host,
		"--bridge", "none", "--iptables=false", "--ip-masq=false",
		"--cgroup-parent", "pybox-test-engine", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = e.dirs[1]
	// The engine ends with the test binary, however that ends (a panic,
	// a timeout): the kernel sends it SIGTERM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// Pdeathsig follows the thread that forked the child: fork from a
	// goroutine locked to its thread, which lives as long as dockerd.
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			cmd.Wait()
		}
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("starting dockerd: %w", err)
	}
	e.cmd, e.done = cmd, done
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if e.answers() {
			return nil
		}
		select {
		case <-done:
			e.cmd = nil
			return errors.New("dockerd exited as it started")
		default:
		}
	}
	return errors.New("dockerd did not answer within 60 s")
}

// Stop sends the engine SIGTERM, as a shutdown does, and waits for it to
// exit (it stops its containers first).
func (e *PrivateEngine) Stop() {
	e.mu.Lock()
	cmd, done := e.cmd, e.done
	e.cmd = nil
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT) // a frozen engine cannot stop
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// Freeze stops the engine's process (SIGSTOP): it holds its connections
// and answers nothing. Thaw lets it go on.
func (e *PrivateEngine) Freeze() { e.signal(syscall.SIGSTOP) }

// Thaw undoes Freeze.
func (e *PrivateEngine) Thaw() { e.signal(syscall.SIGCONT) }

func (e *PrivateEngine) signal(sig syscall.Signal) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd != nil {
		e.cmd.Process.Signal(sig)
	}
}

// Client is a Docker client for the engine.
func (e *PrivateEngine) Client() (*client.Client, error) {
	return client.NewClientWithOpts(client.WithHost(e.Host), client.WithAPIVersionNegotiation())
}

func (e *PrivateEngine) answers() bool {
	cli, err := e.Client()
	if err != nil {
		return false
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = cli.Ping(ctx)
	return err == nil
}

// load copies the sandbox image from the machine's engine, unless the
// engine holds the same image already (its data root is kept between runs).
func (e *PrivateEngine) load(image string) error {
	want, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", image).Output()
	if err != nil {
		return fmt.Errorf("the machine's engine has no %s: %w", image, err)
	}
	have, _ := exec.Command("docker", "-H", e.Host, "image", "inspect", "-f", "{{.Id}}", image).Output()
	if string(have) == string(want) {
		return nil
	}
	save := exec.Command("docker", "save", image)
	load := exec.Command("docker", "-H", e.Host, "load", "-q")
	pipe, err := save.StdoutPipe()
	if err != nil {
		return err
	}
	load.Stdin = pipe
	if err := save.Start(); err != nil {
		return err
	}
	out, lerr := load.CombinedOutput()
	serr := save.Wait()
	if lerr != nil || serr != nil {
		return fmt.Errorf("loading %s into the test's engine: %v %v %s", image, lerr, serr, out)
	}
	return nil
}
