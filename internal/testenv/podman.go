package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// DefaultPodmanHost is where scripts/ensure-podman.sh serves Podman's
// Docker-compatible API.
const DefaultPodmanHost = "unix:///run/podman/podman.sock"

// Podman makes sure Podman's Docker-compatible API answers at
// PYBOX_TEST_PODMAN_HOST (default [DefaultPodmanHost]) with the sandbox
// image, which Podman names localhost/<image> once loaded from Docker, and
// returns the address and the image's name there. It fails, or skips
// where engine tests are not required, like [Engine].
func Podman(t testing.TB, image string) (host, ref string) {
	t.Helper()
	host = os.Getenv("PYBOX_TEST_PODMAN_HOST")
	if host == "" {
		host = DefaultPodmanHost
	}
	ref = os.Getenv("PYBOX_TEST_PODMAN_IMAGE")
	if ref == "" {
		ref = "localhost/" + image
	}
	if err := checkPodman(host, ref); err != nil {
		if Required() {
			t.Fatalf("Podman test cannot run: %v (run scripts/ensure-podman.sh; PYBOX_REQUIRE_ENGINE/CI is set, so this fails instead of skipping)", err)
		}
		t.Skipf("Podman test skipped: %v (scripts/ensure-podman.sh sets it up)", err)
	}
	record(t.Name())
	return host, ref
}

func checkPodman(host, ref string) error {
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := cli.ServerVersion(ctx)
	if err != nil {
		return fmt.Errorf("nothing answers at %s: %w", host, err)
	}
	podman := false
	for _, c := range v.Components {
		podman = podman || strings.HasPrefix(c.Name, "Podman")
	}
	if !podman {
		return fmt.Errorf("%s is not Podman (%v)", host, v.Components)
	}
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return fmt.Errorf("the image %s is not in Podman: %w", ref, err)
	}
	return nil
}
