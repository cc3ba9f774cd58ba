package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/client"
)

// TestPodmanAdapt checks the spec pybox sends to Podman: the pinned seccomp
// profile as a file Podman can read, no tmpfs uid or gid, a process limit.
func TestPodmanAdapt(t *testing.T) {
	cli, err := client.NewClientWithOpts(client.WithHost("unix:///run/podman/podman.sock"))
	if err != nil {
		t.Fatal(err)
	}
	d := &dockerEngine{cli: cli}
	s, err := newSandbox(Options{}, failingParts(nil), nopLogger())
	if err != nil {
		t.Fatal(err)
	}
	spec := s.containerSpec("call", "2000000005:2000000005")
	got, err := d.adapt(spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(got.Seccomp)
	if err != nil || string(b) != pinnedSeccomp {
		t.Errorf("seccomp %q: the file does not hold the pinned profile (%v)", got.Seccomp, err)
	}
	if fi, err := os.Stat(got.Seccomp); err == nil && fi.Mode().Perm() != 0o644 {
		t.Errorf("the profile's mode is %v; want 0644", fi.Mode().Perm())
	}
	if fi, err := os.Stat(filepath.Dir(got.Seccomp)); err != nil || fi.Mode().Perm() != 0o711 || filepath.Dir(filepath.Dir(got.Seccomp)) != filepath.Clean(os.TempDir()) {
		t.Errorf("the profile's directory %s: %v %v; want a directory of its own, 0711, in the temporary directory", filepath.Dir(got.Seccomp), fi, err)
	}
	again, _ := d.adapt(spec)
	if again.Seccomp != got.Seccomp {
		t.Errorf("a second spec got another file: %q, %q", again.Seccomp, got.Seccomp)
	}
	// A cleaner that empties the temporary directory does not break it.
	os.RemoveAll(filepath.Dir(got.Seccomp))
	if again, err := d.adapt(spec); err != nil {
		t.Errorf("after the directory was removed: %v", err)
	} else if b, err := os.ReadFile(again.Seccomp); err != nil || string(b) != pinnedSeccomp {
		t.Errorf("after the directory was removed: %q holds no profile (%v)", again.Seccomp, err)
	} else {
		got = again
	}
	// Another engine value (another server process) gets another directory.
	other := &dockerEngine{cli: cli}
	o, _ := other.adapt(spec)
	if filepath.Dir(o.Seccomp) == filepath.Dir(got.Seccomp) {
		t.Errorf("two engines share the directory %s", filepath.Dir(o.Seccomp))
	}
	other.Close()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(got.Seccomp)); !os.IsNotExist(err) {
		t.Errorf("Close left %s: %v", filepath.Dir(got.Seccomp), err)
	}
	for dir, opts := range got.Tmpfs {
		if strings.Contains(opts, "uid=") || strings.Contains(opts, "gid=") || !strings.Contains(opts, "size=") {
			t.Errorf("tmpfs %s: %q; want its size and no uid or gid", dir, opts)
		}
	}
	if !strings.Contains(spec.Tmpfs["/mnt/outputs"], "uid=") {
		t.Errorf("the Docker spec lost its uid option: %q", spec.Tmpfs["/mnt/outputs"])
	}
	if got.NProc != podmanNProc || spec.NProc != 0 {
		t.Errorf("NProc = %d (Docker %d); want %d for Podman only", got.NProc, spec.NProc, podmanNProc)
	}

	remote, _ := client.NewClientWithOpts(client.WithHost("tcp://podman.example:2375"))
	if _, err := (&dockerEngine{cli: remote}).adapt(spec); err == nil || !strings.Contains(err.Error(), "seccomp profile from a file") {
		t.Errorf("a remote Podman: %v; want an error that says why", err)
	}
	unconfined := spec
	unconfined.Seccomp = "unconfined"
	if got, err := (&dockerEngine{cli: remote}).adapt(unconfined); err != nil || got.Seccomp != "unconfined" {
		t.Errorf("unconfined: %q, %v", got.Seccomp, err)
	}
}
