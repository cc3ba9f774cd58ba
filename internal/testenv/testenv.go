// Package testenv gives tests a real Docker engine, or says loudly why not.
//
// A test that needs the engine calls [Engine] first. Where no engine
// answers, the test is skipped with the reason, unless PYBOX_REQUIRE_ENGINE
// is set (as scripts/test.sh and CI do), in which case it fails: a skipped
// engine test never counts as a pass there. Each test that got the engine
// is appended to the file named by PYBOX_ENGINE_LOG, so the test script can
// say how many tests used the real engine.
package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
)

// Image is the sandbox image tests run, overridable with PYBOX_IMAGE.
func Image(defaultRef string) string {
	if v := os.Getenv("PYBOX_IMAGE"); v != "" {
		return v
	}
	return defaultRef
}

var (
	once    sync.Once
	pingErr error
	logMu   sync.Mutex
)

// Required reports whether engine tests must run rather than skip.
func Required() bool {
	return os.Getenv("PYBOX_REQUIRE_ENGINE") != "" || os.Getenv("CI") != ""
}

// Engine makes sure a Docker engine answers and that image is present.
func Engine(t testing.TB, image string) {
	t.Helper()
	once.Do(func() {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			pingErr = err
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Ping(ctx); err != nil {
			pingErr = fmt.Errorf("no Docker engine answers: %w", err)
			return
		}
		if _, err := cli.ImageInspect(ctx, image); err != nil {
			if errdefs.IsNotFound(err) {
				pingErr = fmt.Errorf("the sandbox image %s is missing: run `sudo go run ./cmd/pybox image build`", image)
			} else {
				pingErr = err
			}
		}
	})
	if pingErr != nil {
		if Required() {
			t.Fatalf("engine test cannot run: %v (PYBOX_REQUIRE_ENGINE/CI is set, so this fails instead of skipping)", pingErr)
		}
		t.Skipf("engine test skipped: %v (set PYBOX_REQUIRE_ENGINE=1 to fail instead)", pingErr)
	}
	record(t.Name())
}

func record(name string) {
	path := os.Getenv("PYBOX_ENGINE_LOG")
	if path == "" {
		return
	}
	logMu.Lock()
	defer logMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	dir, _ := os.Getwd()
	fmt.Fprintf(f, "%s %s\n", filepath.Base(dir), name)
}
