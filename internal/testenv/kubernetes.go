package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// KubeNetns is the network namespace scripts/ensure-kubernetes.sh keeps
// the cluster's addresses in: pybox and kubectl reach the cluster from
// inside it.
const KubeNetns = "pybox-k8s"

var (
	kubeOnce sync.Once
	kubeErr  error
)

// InKube is the command line prefix that runs a command in the cluster's
// network namespace.
func InKube() []string {
	return []string{"nsenter", "--net=/run/netns/" + KubeNetns}
}

// Kubernetes makes sure the cluster of scripts/ensure-kubernetes.sh
// answers, with the sandbox image on its node. Like [Engine], it fails
// where engine tests are required (CI) and skips elsewhere.
func Kubernetes(t testing.TB, image string) {
	t.Helper()
	kubeOnce.Do(func() {
		if _, err := os.Stat("/run/netns/" + KubeNetns); err != nil {
			kubeErr = fmt.Errorf("no network namespace %s: run scripts/ensure-kubernetes.sh", KubeNetns)
			return
		}
		out, err := Kubectl(context.Background(), "get", "nodes", "-o", "jsonpath={.items[*].status.images[*].names}")
		if err != nil {
			kubeErr = fmt.Errorf("the cluster does not answer: %v %s (run scripts/ensure-kubernetes.sh)", err, out)
			return
		}
		if !strings.Contains(string(out), image) {
			kubeErr = fmt.Errorf("no node has the sandbox image %s (scripts/ensure-kubernetes.sh loads it)", image)
		}
	})
	if kubeErr != nil {
		if Required() {
			t.Fatalf("Kubernetes test cannot run: %v (PYBOX_REQUIRE_ENGINE/CI is set, so this fails instead of skipping)", kubeErr)
		}
		t.Skipf("Kubernetes test skipped: %v", kubeErr)
	}
	record(t.Name())
}

// Kubectl runs kubectl in the cluster's network namespace.
func Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	argv := append(InKube(), append([]string{"kubectl"}, args...)...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
}

// KubeDir is where scripts/ensure-kubernetes.sh keeps the cluster.
func KubeDir() string {
	if d := os.Getenv("PYBOX_K8S_DIR"); d != "" {
		return d
	}
	return "/var/lib/pybox-k8s"
}

// KubeCtr runs ctr against the cluster's containerd (Kubernetes' namespace).
func KubeCtr(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	argv := append([]string{"-a", KubeDir() + "/containerd/containerd.sock", "-n", "k8s.io"}, args...)
	return exec.CommandContext(ctx, "ctr", argv...).CombinedOutput()
}
