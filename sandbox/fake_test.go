package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

// failingEngine fails every call with err: the error paths a real engine
// cannot be made to take on demand.
type failingEngine struct{ err error }

func (f failingEngine) Create(context.Context, containerSpec) (string, error) { return "", f.err }
func (f failingEngine) Launch(context.Context, string) (stream, error)        { return nil, f.err }
func (f failingEngine) Kill(context.Context, string) error                    { return f.err }
func (f failingEngine) Wait(context.Context, string) (int, error)             { return 0, f.err }
func (f failingEngine) Inspect(context.Context, string) (containerState, error) {
	return containerState{}, f.err
}
func (f failingEngine) Remove(context.Context, string) error { return f.err }
func (f failingEngine) List(context.Context, map[string]string) ([]listedContainer, error) {
	return nil, f.err
}
func (f failingEngine) Ping(context.Context) (string, error) { return "", f.err }
func (f failingEngine) ImageInspect(context.Context, string) (imageInfo, error) {
	return imageInfo{}, f.err
}
func (f failingEngine) ImageImport(context.Context, io.Reader, string, []string) error { return f.err }
func (f failingEngine) ServerInfo(context.Context) (EngineInfo, error)                 { return EngineInfo{}, f.err }
func (f failingEngine) Host() string                                                   { return "unix:///fake.sock" }

func TestEngineFailures(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"connection refused", &net.OpError{Op: "dial", Net: "unix", Err: syscall.ECONNREFUSED}, "did not answer"},
		{"image missing", errImageMissing, "pybox image build"},
		{"engine refuses", errors.New("invalid runtime name: runsc"), "refused to run the sandbox: invalid runtime name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := newSandbox(Options{}, failingEngine{tt.err}, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			res := s.Run(context.Background(), Request{Code: "print(1)"})
			if res.Error != ErrSandboxUnavailable || res.ExitCode != ExitNotRun {
				t.Errorf("Run() = error %q exit %d; want sandbox_unavailable, 1", res.Error, res.ExitCode)
			}
			if !strings.Contains(res.Stderr, tt.want) || !strings.Contains(res.Stderr, "unix:///fake.sock") {
				t.Errorf("Run().Stderr = %q; want it to contain %q and the engine's address", res.Stderr, tt.want)
			}
		})
	}
}

func TestOptionsRefuseRoot(t *testing.T) {
	if _, err := (Options{User: "0:0"}).resolve(); err == nil {
		t.Error("resolve() accepted user 0 without AllowRoot")
	}
	if _, err := (Options{User: "0:0", AllowRoot: true}).resolve(); err != nil {
		t.Errorf("resolve() with AllowRoot: %v", err)
	}
}

func nopLogger() zerolog.Logger { return zerolog.Nop() }
