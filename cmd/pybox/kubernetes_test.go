package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/pybox/pybox/internal/testenv"
	"github.com/pybox/pybox/sandbox"
)

func sessionKey(id string) string { return sandbox.SessionKey(id) }

// kubePods lists the sandbox pods in the test cluster whose owner
// annotation starts with prefix ("" for all).
func kubePods(t *testing.T, prefix string) []corev1.Pod {
	t.Helper()
	out, err := testenv.Kubectl(context.Background(), "get", "pods", "-l", "pybox.managed=true", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl get pods: %v %s", err, out)
	}
	var list corev1.PodList
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("kubectl get pods: %v", err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if strings.HasPrefix(p.Annotations["pybox.owner"], prefix) {
			pods = append(pods, p)
		}
	}
	return pods
}

func podNames(pods []corev1.Pod) []string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Name+"("+string(p.Status.Phase)+")")
	}
	return n
}

// kubeEnv is the environment of a pybox on the test cluster's backend.
func kubeEnv(pool string) []string {
	return []string{"PYBOX_BACKEND=kubernetes", "PYBOX_POOL=" + pool, "PYBOX_IMAGE_PULL_POLICY=Never"}
}

// TestKubernetes runs the core acceptance calls through a real pybox whose
// sandboxes are pods of the real single-node cluster that
// scripts/ensure-kubernetes.sh runs, with the warm pool off and on; reads
// the walls from inside the pod and from its spec; and checks that nothing
// is left in the cluster once the server has exited.
func TestKubernetes(t *testing.T) {
	testenv.Kubernetes(t, image())
	const canary = "KUBE_CANARY_3b81f0"
	for _, pool := range []string{"0", "2"} {
		t.Run("pool="+pool, func(t *testing.T) {
			p := startProcIn(t, testenv.InKube(), append(kubeEnv(pool), "PYBOX_MAX_CONCURRENT=3", "PYBOX_SECRET_CANARY="+canary))
			// A pod has its loopback and its end of a veth pair.
			coreCalls(t, p, canary, "['eth0', 'lo']")
			t.Run("pod spec", func(t *testing.T) { kubePodSpec(t, p) })
			t.Run("network", func(t *testing.T) { kubeNetwork(t, p) })
			t.Run("pod log", func(t *testing.T) { kubePodLog(t, p) })
			prefix := p.ownerPrefix()
			p.endStdio(t)
			if left := kubePods(t, prefix); len(left) > 0 {
				t.Errorf("pods left in the cluster after the server exited: %v", podNames(left))
			}
		})
	}
}

// kubePodSpec reads the walls from the spec of a running call's pod.
func kubePodSpec(t *testing.T, p *proc) {
	done := make(chan map[string]any, 1)
	go func() {
		done <- p.runPython(map[string]any{"code": "import time; time.sleep(3); print('ok')"}, 90*time.Second).Result.StructuredContent
	}()
	var pod *corev1.Pod
	waitFor(t, "the call's pod", 30*time.Second, func() bool {
		for _, q := range kubePods(t, p.ownerPrefix()) {
			// The call's pod, or a pooled one: the same spec.
			if q.Status.Phase == corev1.PodRunning && q.Labels["pybox.session"] == "" {
				pod = &q
				return true
			}
		}
		return false
	})
	if r := <-done; r["stdout"] != "ok\n" {
		t.Errorf("the call: %v", r)
	}
	s := pod.Spec
	c := s.Containers[0]
	check := func(ok bool, what string) {
		if !ok {
			t.Errorf("pod spec: %s", what)
		}
	}
	sc, psc := c.SecurityContext, s.SecurityContext
	check(psc != nil && psc.RunAsUser != nil && *psc.RunAsUser >= 2000000000 && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot, "a non-root uid of its own from the range")
	check(sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "no privilege escalation")
	check(sc != nil && sc.Privileged != nil && !*sc.Privileged, "not privileged")
	check(sc != nil && sc.Capabilities != nil && len(sc.Capabilities.Drop) == 1 && sc.Capabilities.Drop[0] == "ALL" && len(sc.Capabilities.Add) == 0, "every capability dropped")
	check(sc != nil && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "a read-only root")
	check(psc != nil && psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, "the runtime's default seccomp profile")
	check(s.AutomountServiceAccountToken != nil && !*s.AutomountServiceAccountToken, "no service account token")
	check(s.EnableServiceLinks != nil && !*s.EnableServiceLinks, "no service links")
	check(!s.HostNetwork && !s.HostPID && !s.HostIPC, "no host namespaces")
	check(s.RestartPolicy == corev1.RestartPolicyNever, "restartPolicy Never")
	check(s.ActiveDeadlineSeconds != nil && *s.ActiveDeadlineSeconds > 30 && *s.ActiveDeadlineSeconds < 3600, fmt.Sprintf("a deadline the cluster enforces, past the call's (%d s)", *s.ActiveDeadlineSeconds))
	lim := c.Resources.Limits
	check(lim.Memory().Value() == 256<<20, fmt.Sprintf("a 256 MiB memory limit (%v)", lim.Memory()))
	check(lim.Cpu().MilliValue() == 1000, fmt.Sprintf("a 1 CPU limit (%v)", lim.Cpu()))
	check(!lim.StorageEphemeral().IsZero(), "an ephemeral-storage limit")
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	for _, path := range []string{"/tmp", "/mnt/user-data", "/mnt/outputs", "/dev/shm"} {
		ok := false
		for _, v := range s.Volumes {
			if v.Name == mounts[path] && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && v.EmptyDir.SizeLimit != nil && !v.EmptyDir.SizeLimit.IsZero() {
				ok = true
			}
		}
		check(ok, path+" is a memory-backed emptyDir with a size limit")
	}
	for _, v := range s.Volumes {
		check(v.HostPath == nil && v.Projected == nil && v.Secret == nil, "no host path, projected or secret volume: "+v.Name)
	}
	check(len(c.Env) == 0 || !strings.Contains(fmt.Sprint(c.Env), "KUBE_CANARY"), "none of the server's environment")
}

// kubePodLog: the node keeps a pod's stdout in its log, so the runner
// seals what it writes there; a session's pod (which outlives its calls)
// shows in its log neither the code's output nor its files.
func kubePodLog(t *testing.T, p *proc) {
	const marker = "PYBOX-LOG-MARKER-5e0c1d"
	// Past 16 KiB: the runtime writes a log line when it has a newline or
	// that much, and sealed bytes seldom hold a newline.
	r := p.runPython(map[string]any{"code": "print('" + marker + "')\nprint('x' * 40000)\nopen('/mnt/outputs/m.txt', 'w').write('" + marker + "')", "session_id": "new"}, 90*time.Second).Result.StructuredContent
	if out, _ := r["stdout"].(string); !strings.Contains(out, marker) {
		t.Fatalf("the call: %v", r)
	}
	// Every session pod of this server: the call's is among them.
	seen := 0
	for _, q := range kubePods(t, p.ownerPrefix()) {
		if q.Labels["pybox.session"] != "true" || q.Status.Phase != corev1.PodRunning {
			continue
		}
		logs, err := testenv.Kubectl(context.Background(), "logs", q.Name)
		if err != nil {
			t.Fatalf("kubectl logs: %v %s", err, logs)
		}
		seen += len(logs)
		if strings.Contains(string(logs), marker) || strings.Contains(string(logs), "m.txt") {
			t.Errorf("pod %s's log shows the output: %.200q", q.Name, logs)
		}
	}
	if seen < len(marker) {
		t.Errorf("the session pods' logs hold %d bytes: the test would see nothing", seen)
	}
	if id, _ := r["session_id"].(string); id != "" {
		p.request("tools/call", map[string]any{"name": "python_sessions", "arguments": map[string]any{"end": id}}, 30*time.Second)
	}
}

// kubeNetwork shows that a sandbox pod reaches nothing: not the API
// server, not the kubelet, not another sandbox pod, not the internet.
func kubeNetwork(t *testing.T, p *proc) {
	// Another sandbox to aim at, running while the probe does.
	other := make(chan map[string]any, 1)
	go func() {
		other <- p.runPython(map[string]any{"code": "import time; time.sleep(8)"}, 90*time.Second).Result.StructuredContent
	}()
	var otherIP string
	waitFor(t, "another sandbox pod", 30*time.Second, func() bool {
		for _, q := range kubePods(t, p.ownerPrefix()) {
			if q.Status.Phase == corev1.PodRunning && q.Status.PodIP != "" && !strings.HasPrefix(q.Annotations["pybox.call"], "pool-") {
				otherIP = q.Status.PodIP
				return true
			}
		}
		return false
	})
	r := p.runPython(map[string]any{"code": fmt.Sprintf(`import socket, subprocess
targets = [("10.254.254.1", 6443), ("10.254.254.1", 10250), ("%s", 80), ("1.1.1.1", 53), ("8.8.8.8", 443)]
for ip, port in targets:
    try:
        socket.create_connection((ip, port), timeout=2).close()
        print(ip, port, "reached")
    except OSError as e:
        print(ip, port, "refused" if e.errno == 111 else "no route" if e.errno in (101, 113) else "timed out" if isinstance(e, TimeoutError) else e.errno)
print(open("/proc/net/route").read().count("\n") - 1, "routes")
`, otherIP), "timeout": 30}, 90*time.Second).Result.StructuredContent
	out, _ := r["stdout"].(string)
	if strings.Contains(out, "reached") || strings.Contains(out, "refused") || r["exit_code"] != 0.0 {
		t.Errorf("a sandbox pod reached something:\n%s %v", out, r["stderr"])
	}
	t.Logf("from a sandbox pod:\n%s", out)
	<-other
}

// TestKubernetesServerKilled kills pybox in the middle of a call. SIGKILL:
// the pod's stdin closes with pybox's attach, so its runner ends at once.
// Frozen: pybox stopped (SIGSTOP, its attach open) and the sandbox's
// container paused too (so that its runner cannot end itself either), the
// cluster itself ends the pod at its activeDeadlineSeconds.
func TestKubernetesServerKilled(t *testing.T) {
	testenv.Kubernetes(t, image())
	for _, how := range []string{"SIGKILL", "frozen"} {
		t.Run(how, func(t *testing.T) {
			p := startProcIn(t, testenv.InKube(), kubeEnv("0"))
			p.start("tools/call", map[string]any{"name": "run_python", "arguments": map[string]any{"code": "import time\nopen('/tmp/up', 'w').close()\nwhile True: time.sleep(1)", "timeout": 5}})
			prefix := p.ownerPrefix()
			var pod corev1.Pod
			waitFor(t, "the call's pod", 30*time.Second, func() bool {
				for _, q := range kubePods(t, prefix) {
					if q.Status.Phase == corev1.PodRunning {
						pod = q
						return true
					}
				}
				return false
			})
			// The code runs (so pybox's attach is up) once /tmp/up exists.
			waitFor(t, "the call's code", 30*time.Second, func() bool {
				_, err := testenv.Kubectl(context.Background(), "exec", pod.Name, "--", "test", "-e", "/tmp/up")
				return err == nil
			})
			deadline := pod.Status.StartTime.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second)
			killed := time.Now()
			if how == "frozen" {
				p.cmd.Process.Signal(syscall.SIGSTOP)
				id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
				if out, err := testenv.KubeCtr(context.Background(), "tasks", "pause", id); err != nil {
					t.Fatalf("pausing the sandbox's container: %v %s", err, out)
				}
			} else {
				p.cmd.Process.Signal(syscall.SIGKILL)
			}
			var last corev1.Pod
			waitFor(t, "the pod's end", time.Until(deadline)+60*time.Second, func() bool {
				for _, q := range kubePods(t, prefix) {
					if q.Name == pod.Name {
						last = q
						return q.Status.Phase != corev1.PodRunning && q.Status.Phase != corev1.PodPending
					}
				}
				last = corev1.Pod{}
				return true // gone
			})
			ended := time.Now()
			t.Logf("%s: the pod ended (%s %s) %v after the signal; its deadline was %v after it", how, last.Status.Phase, last.Status.Reason, ended.Sub(killed).Round(10*time.Millisecond), deadline.Sub(killed).Round(time.Second))
			if ended.After(deadline.Add(10 * time.Second)) {
				t.Errorf("the pod ran past its deadline: ended %v, deadline %v", ended, deadline)
			}
			switch how {
			case "SIGKILL":
				if ended.Sub(killed) > 10*time.Second {
					t.Errorf("the pod of a killed server ran %v on", ended.Sub(killed))
				}
			case "frozen":
				if last.Status.Reason != "DeadlineExceeded" || ended.Before(deadline.Add(-time.Second)) {
					t.Errorf("the frozen sandbox's pod ended %s %s at %v of its deadline; want the cluster's DeadlineExceeded at it", last.Status.Phase, last.Status.Reason, ended.Sub(deadline))
				}
			}
			// What is left is a finished pod object; the next pybox on this
			// host reaps it once its owner is dead.
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
			q := startProcIn(t, testenv.InKube(), kubeEnv("0"))
			waitFor(t, "the reaping of the dead server's pods", 60*time.Second, func() bool { return len(kubePods(t, prefix)) == 0 })
			q.stdin.Close()
		})
	}
}

// inKubeClient is an HTTP client whose connections are made in the test
// cluster's network namespace, where the pybox replicas listen.
func inKubeClient() *http.Client {
	return &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{DialContext: inKubeDial}}
}

// inKubeDial connects from inside the test cluster's network namespace.
func inKubeDial(ctx context.Context, network, addr string) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		// This thread enters the namespace and is never used again:
		// the goroutine ends locked, so the runtime discards it.
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + testenv.KubeNetns)
		if err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
		}
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		ch <- res{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// startKubeReplica starts a pybox replica on Streamable HTTP in the test
// cluster's network namespace, with the given tokens, and returns its
// address and process. Its reconciler runs every second: it must leave a
// dead replica's shared sessions alone.
func startKubeReplica(t *testing.T, token string) (string, *exec.Cmd) {
	t.Helper()
	return startHTTPIn(t, testenv.InKube(), inKubeDial, "http", token, append(kubeEnv("0"), "PYBOX_RECONCILE_INTERVAL=1s")...)
}

// TestKubernetesReplicas: two pybox replicas on one cluster, no sticky
// routing. A session started through one (by a client of protocol
// 2026-07-28, whose sessions belong to its token's principal) is used and
// ended through the other; another principal reaches it through neither;
// and a replica killed with SIGKILL leaves its session to the other.
func TestKubernetesReplicas(t *testing.T) {
	testenv.Kubernetes(t, image())
	const alice, mallory = "alice:replica-token-alice-0123456789", "mallory:replica-token-mallory-0123456789"
	tokens := alice + "," + mallory
	a, acmd := startKubeReplica(t, tokens)
	b, _ := startKubeReplica(t, tokens)
	c := inKubeClient()
	call := func(addr, token string, tool string, args map[string]any) toolResult {
		t.Helper()
		raw, status := modernWith(t, c, addr, strings.SplitN(token, ":", 2)[1], "tools/call", map[string]any{"name": tool, "arguments": args})
		var r toolResult
		if err := json.Unmarshal(raw, &r); err != nil || status != http.StatusOK || r.Error != nil {
			t.Fatalf("%s via %s: HTTP %d %v %.300s", tool, addr, status, err, raw)
		}
		return r
	}
	// A replica is ready once the cluster answers and the image is known;
	// its metrics say the backend.
	waitFor(t, "the replica's /readyz", 60*time.Second, func() bool { return answersOK(c, "http://"+a+"/readyz") })
	req, _ := http.NewRequest(http.MethodGet, "http://"+a+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+strings.SplitN(alice, ":", 2)[1])
	if resp, err := c.Do(req); err != nil {
		t.Errorf("/metrics: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `backend="kubernetes"`) || !strings.Contains(string(body), "pybox_ready 1") {
			t.Errorf("/metrics of a Kubernetes replica: %d, no backend=kubernetes or pybox_ready 1", resp.StatusCode)
		}
	}
	first := call(a, alice, "run_python", map[string]any{"code": "x = 41", "session_id": "new"})
	id, _ := first.Result.Structured["session_id"].(string)
	if id == "" {
		t.Fatalf("no session: %v", first.Result.Structured)
	}
	if r := call(b, alice, "run_python", map[string]any{"code": "x += 1\nprint(x)", "session_id": id}); r.Result.Structured["stdout"] != "42\n" {
		t.Fatalf("the session through the other replica: %v", r.Result.Structured)
	}
	if r := call(a, alice, "run_python", map[string]any{"code": "print(x)", "session_id": id}); r.Result.Structured["stdout"] != "42\n" {
		t.Fatalf("back through the first: %v", r.Result.Structured)
	}
	for _, addr := range []string{a, b} {
		if r := call(addr, mallory, "run_python", map[string]any{"code": "print(x)", "session_id": id}); r.Result.Structured["error"] != "session_expired" {
			t.Errorf("another principal used the session through %s: %v", addr, r.Result.Structured)
		}
		if r := call(addr, mallory, "python_sessions", map[string]any{"end": id}); len(r.Result.Structured["ended"].([]any)) != 0 {
			t.Errorf("another principal ended the session through %s: %v", addr, r.Result.Structured)
		}
	}
	// Two calls at once through the two replicas take turns.
	done := make(chan toolResult, 2)
	for _, addr := range []string{a, b} {
		go func() {
			raw, _ := modernWith(t, c, addr, strings.SplitN(alice, ":", 2)[1], "tools/call", map[string]any{"name": "run_python", "arguments": map[string]any{"code": "import time\nx += 1\ntime.sleep(1)\nprint(x)", "session_id": id}})
			var r toolResult
			json.Unmarshal(raw, &r)
			done <- r
		}()
	}
	got := []any{(<-done).Result.Structured["stdout"], (<-done).Result.Structured["stdout"]}
	if !(got[0] == "43\n" && got[1] == "44\n" || got[0] == "44\n" && got[1] == "43\n") {
		t.Errorf("two calls at once through two replicas printed %q; want 43 and 44, one after the other", got)
	}
	// The first replica dies; the other goes on with the session, then
	// ends it.
	acmd.Process.Signal(syscall.SIGKILL)
	time.Sleep(3 * time.Second) // the other replica's reconciler runs meanwhile
	if r := call(b, alice, "run_python", map[string]any{"code": "print(x)", "session_id": id}); r.Result.Structured["stdout"] != "44\n" {
		t.Fatalf("after the first replica's death: %v", r.Result.Structured)
	}
	if r := call(b, alice, "python_sessions", map[string]any{"end": id}); len(r.Result.Structured["ended"].([]any)) != 1 {
		t.Fatalf("ending it through the other replica: %v", r.Result.Structured)
	}
	waitFor(t, "the session's pod to go", 30*time.Second, func() bool {
		out, _ := testenv.Kubectl(context.Background(), "get", "pods", "-l", "pybox.session-key="+sessionKey(id), "-o", "name")
		return strings.TrimSpace(string(out)) == ""
	})
	if r := call(a2(t, tokens), alice, "run_python", map[string]any{"code": "print(x)", "session_id": id}); r.Result.Structured["error"] != "session_expired" {
		t.Errorf("an ended session answered: %v", r.Result.Structured)
	}
}

// a2 starts one more replica, for a last look.
func a2(t *testing.T, tokens string) string {
	addr, _ := startKubeReplica(t, tokens)
	return addr
}

// TestKubernetesRBAC runs pybox as deploy/kubernetes/ sets it up: in its
// namespace, as its ServiceAccount, with the Role's verbs and no more, the
// NetworkPolicy applied (--network-policy require): one-shot calls, the
// pool and a session work.
func TestKubernetesRBAC(t *testing.T) {
	testenv.Kubernetes(t, image())
	ctx := context.Background()
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "networkpolicy.yaml"} {
		if out, err := testenv.Kubectl(ctx, "apply", "-f", "../../deploy/kubernetes/"+f); err != nil {
			t.Fatalf("kubectl apply %s: %v %s", f, err, out)
		}
	}
	tok, err := testenv.Kubectl(ctx, "-n", "pybox", "create", "token", "pybox", "--duration", "10m")
	if err != nil {
		t.Fatalf("a token of the pybox ServiceAccount: %v %s", err, tok)
	}
	server, err := testenv.Kubectl(ctx, "config", "view", "--minify", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := testenv.Kubectl(ctx, "config", "view", "--minify", "--raw", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}")
	if err != nil {
		t.Fatal(err)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: pybox, user: {token: %s}}]
contexts: [{name: c, context: {cluster: c, user: pybox, namespace: pybox}}]
current-context: c
`, server, ca, strings.TrimSpace(string(tok)))
	path := t.TempDir() + "/kubeconfig"
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	// Only what the Role allows: no pods outside the namespace.
	if out, err := testenv.Kubectl(ctx, "--kubeconfig", path, "auth", "can-i", "list", "pods", "-n", "default"); err == nil || strings.TrimSpace(string(out)) != "no" {
		t.Errorf("the ServiceAccount can list pods in default: %s", out)
	}
	p := startProcIn(t, testenv.InKube(), append(kubeEnv("1"), "PYBOX_KUBECONFIG="+path, "PYBOX_NETWORK_POLICY=require"))
	if r := p.runPython(map[string]any{"code": "print(6 * 7)"}, 90*time.Second).Result.StructuredContent; r["stdout"] != "42\n" {
		t.Errorf("a call as the ServiceAccount: %v", r)
	}
	first := p.runPython(map[string]any{"code": "x = 1", "session_id": "new"}, 90*time.Second).Result.StructuredContent
	id, _ := first["session_id"].(string)
	if r := p.runPython(map[string]any{"code": "print(x + 1)", "session_id": id}, 90*time.Second).Result.StructuredContent; r["stdout"] != "2\n" {
		t.Errorf("a session as the ServiceAccount: %v %v", first, r)
	}
	out, err := testenv.Kubectl(ctx, "-n", "pybox", "get", "pods", "-l", "pybox.managed=true", "-o", "name")
	if err != nil || !strings.Contains(string(out), "pod/") {
		t.Errorf("no sandbox pods in the pybox namespace: %v %s", err, out)
	}
	prefix := p.ownerPrefix()
	p.stdin.Close()
	<-p.exited
	waitFor(t, "the namespace's sandbox pods to go", 30*time.Second, func() bool {
		out, _ := testenv.Kubectl(ctx, "-n", "pybox", "get", "pods", "-l", "pybox.managed=true", "-o", "jsonpath={.items[*].metadata.annotations.pybox\\.owner}")
		return !strings.Contains(string(out), prefix)
	})
	// Without the policy, --network-policy require refuses to start.
	if out, err := testenv.Kubectl(ctx, "-n", "pybox", "delete", "networkpolicy", "pybox-sandboxes-deny-all"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	argv := append(testenv.InKube(), binary, "exec", "-c", "print(1)")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), append(kubeEnv("0"), "PYBOX_IMAGE="+image(), "PYBOX_KUBECONFIG="+path, "PYBOX_NETWORK_POLICY=require")...)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "NetworkPolicy") {
		t.Errorf("pybox ran without the NetworkPolicy it requires: %v %s", err, out)
	}
	testenv.Kubectl(ctx, "apply", "-f", "../../deploy/kubernetes/networkpolicy.yaml")
}

// TestKubernetesOwnerReference: pybox in a pod of the cluster (the
// Deployment passes its pod's name and uid) makes its sandbox pods
// dependents of that pod, so the cluster's garbage collector removes them
// with it, with no pybox left to do it.
func TestKubernetesOwnerReference(t *testing.T) {
	testenv.Kubernetes(t, image())
	ctx := context.Background()
	name := fmt.Sprintf("pybox-replica-stand-in-%d", os.Getpid())
	if out, err := testenv.Kubectl(ctx, "run", name, "--image", image(), "--image-pull-policy", "Never", "--restart", "Never",
		"--overrides", `{"spec":{"automountServiceAccountToken":false,"securityContext":{"runAsUser":2000000001,"runAsNonRoot":true}}}`,
		"--command", "--", "python3", "-c", "import time; time.sleep(600)"); err != nil {
		t.Fatalf("the stand-in pod: %v %s", err, out)
	}
	t.Cleanup(func() { testenv.Kubectl(ctx, "delete", "pod", name, "--grace-period=0", "--wait=false") })
	uid, err := testenv.Kubectl(ctx, "get", "pod", name, "-o", "jsonpath={.metadata.uid}")
	if err != nil {
		t.Fatal(err)
	}
	p := startProcIn(t, testenv.InKube(), append(kubeEnv("2"), "PYBOX_POD_NAME="+name, "PYBOX_POD_UID="+string(uid), "PYBOX_POD_NAMESPACE=default"))
	prefix := p.ownerPrefix()
	waitFor(t, "the pool's pods", 60*time.Second, func() bool { return len(kubePods(t, prefix)) >= 2 })
	for _, q := range kubePods(t, prefix) {
		refs := q.OwnerReferences
		if len(refs) != 1 || refs[0].Kind != "Pod" || refs[0].Name != name || string(refs[0].UID) != string(uid) {
			t.Fatalf("sandbox pod %s is owned by %v; want the stand-in %s", q.Name, refs, name)
		}
	}
	p.cmd.Process.Signal(syscall.SIGKILL) // nobody left to clean up
	<-p.exited
	start := time.Now()
	if out, err := testenv.Kubectl(ctx, "delete", "pod", name, "--grace-period=0", "--wait=false"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	waitFor(t, "the garbage collector to remove the sandbox pods", 60*time.Second, func() bool { return len(kubePods(t, prefix)) == 0 })
	t.Logf("the sandbox pods were gone %v after their owner pod's deletion", time.Since(start).Round(10*time.Millisecond))
}

// TestKubernetesMissingImage: an image no node has (and may not be pulled)
// is sandbox_unavailable, saying how to get it onto the nodes, and leaves
// no pod.
func TestKubernetesMissingImage(t *testing.T) {
	testenv.Kubernetes(t, image())
	argv := append(testenv.InKube(), binary, "exec", "-c", "print(1)")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), append(kubeEnv("0"), "PYBOX_IMAGE=pybox-sandbox:not-on-any-node")...)
	out, _ := cmd.Output()
	var r map[string]any
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if stderr, _ := r["stderr"].(string); r["error"] != "sandbox_unavailable" || !strings.Contains(stderr, "is on no node") || !strings.Contains(stderr, "ErrImageNeverPull") {
		t.Errorf("got %v; want sandbox_unavailable saying the image is on no node", r)
	}
	if left := kubePods(t, fmt.Sprintf("%s/%d/", hostname(t), cmd.Process.Pid)); len(left) > 0 {
		t.Errorf("pods left: %v", podNames(left))
	}
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}
