package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/klog/v2"
)

// KubeOptions configures the Kubernetes backend: each sandbox is a pod.
type KubeOptions struct {
	// Kubeconfig is a kubeconfig file; "" finds the configuration as
	// kubectl does (the in-cluster service account, KUBECONFIG,
	// ~/.kube/config).
	Kubeconfig string
	// Namespace holds the sandbox pods; "" is the configuration's (or the
	// service account's) namespace.
	Namespace string
	// RuntimeClass names the pods' RuntimeClass (such as "gvisor"); ""
	// is the cluster's default runtime.
	RuntimeClass string
	// NodeSelector places the pods.
	NodeSelector map[string]string
	// Tolerations let them onto tainted nodes: KEY[=VALUE]:EFFECT, or
	// KEY:EFFECT with Exists.
	Tolerations []string
	// NetworkPolicy is "create" (pybox makes its deny-all policy for the
	// sandbox pods when missing), "require" (pybox refuses to start
	// without it) or "off" (for clusters whose network isolates pods in
	// another way; the pods then have what the cluster gives them).
	NetworkPolicy string
	// SeccompLocalhost, when set, is a seccomp profile on every node
	// (under the kubelet's seccomp directory) that the pods use instead of
	// the runtime's default.
	SeccompLocalhost string
	// ImagePullPolicy is the pods'; "" is IfNotPresent.
	ImagePullPolicy string
	// EphemeralStorage bounds each pod's writes outside its memory-backed
	// volumes (its logs, mostly); 0 means 64 MiB.
	EphemeralStorage int64
}

// NetworkPolicyName is the deny-all policy of the sandbox pods.
const NetworkPolicyName = "pybox-sandboxes-deny-all"

// kubeContainer is the sandbox container's name in its pod.
const kubeContainer = "sandbox"

// The labels pybox puts on a pod hold values Kubernetes allows (a label
// value is at most 63 characters of [A-Za-z0-9._-]); the values as pybox
// knows them (an owner is host/pid/start) are annotations of the same name.
var labelUnsafe = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func labelValue(v string) string {
	v = labelUnsafe.ReplaceAllString(v, "_")
	if len(v) > 63 {
		v = v[len(v)-63:]
	}
	return strings.Trim(v, "._-")
}

type kubeEngine struct {
	cs  kubernetes.Interface
	cfg *rest.Config
	ns  string
	opt KubeOptions
	// owner, when pybox runs in a pod of the cluster, makes its pods
	// dependents of that pod: the cluster's garbage collector removes them
	// when the replica's pod goes.
	owner *metav1.OwnerReference
}

// newKubernetes returns a Sandbox whose sandboxes are pods of a cluster.
func newKubernetes(opt Options, k KubeOptions, log zerolog.Logger) (*Sandbox, error) {
	eng, err := newKubeEngine(k)
	if err != nil {
		return nil, err
	}
	if err := eng.ensurePolicy(context.Background()); err != nil {
		return nil, err
	}
	// A pod has no pids limit of its own: the runner sets RLIMIT_NPROC.
	return newSandbox(opt, engineParts{ctr: eng, lst: eng, probe: eng, close: func() error { return nil }, rlimitProcs: true, store: eng}, log)
}

func kubeConfig(path string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("no Kubernetes configuration (in-cluster, KUBECONFIG or ~/.kube/config): %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	return cfg, ns, nil
}

func newKubeEngine(k KubeOptions) (*kubeEngine, error) {
	// client-go's own log lines (a closed stream's copy errors, which the
	// stream's end reports to pybox anyway) would go to stderr unformatted.
	klog.SetLogger(logr.Discard())
	cfg, ns, err := kubeConfig(k.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "pybox"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if k.Namespace != "" {
		ns = k.Namespace
	}
	switch k.NetworkPolicy {
	case "":
		k.NetworkPolicy = "create"
	case "create", "require", "off":
	default:
		return nil, fmt.Errorf("--network-policy %q: give create, require or off", k.NetworkPolicy)
	}
	if k.EphemeralStorage <= 0 {
		k.EphemeralStorage = 64 << 20
	}
	if k.ImagePullPolicy == "" {
		k.ImagePullPolicy = string(corev1.PullIfNotPresent)
	}
	if _, err := tolerations(k.Tolerations); err != nil {
		return nil, err
	}
	e := &kubeEngine{cs: cs, cfg: cfg, ns: ns, opt: k}
	// In a pod of the cluster (the Deployment gives these through the
	// downward API), the sandbox pods depend on it.
	if name, uid := os.Getenv("PYBOX_POD_NAME"), os.Getenv("PYBOX_POD_UID"); name != "" && uid != "" && os.Getenv("PYBOX_POD_NAMESPACE") == ns {
		e.owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: name, UID: types.UID(uid)}
	}
	return e, nil
}

func tolerations(specs []string) ([]corev1.Toleration, error) {
	var out []corev1.Toleration
	for _, s := range specs {
		kv, effect, ok := strings.Cut(s, ":")
		if !ok || kv == "" {
			return nil, fmt.Errorf("--toleration %q: give KEY[=VALUE]:EFFECT", s)
		}
		t := corev1.Toleration{Key: kv, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(effect)}
		if k, v, ok := strings.Cut(kv, "="); ok {
			t.Key, t.Value, t.Operator = k, v, corev1.TolerationOpEqual
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute, "":
		default:
			return nil, fmt.Errorf("--toleration %q: the effect is NoSchedule, PreferNoSchedule or NoExecute", s)
		}
		out = append(out, t)
	}
	return out, nil
}

// ensurePolicy makes (or, with "require", checks) the deny-all
// NetworkPolicy of the sandbox pods: no ingress, no egress.
func (e *kubeEngine) ensurePolicy(ctx context.Context) error {
	if e.opt.NetworkPolicy == "off" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, engineCallTimeout)
	defer cancel()
	_, err := e.cs.NetworkingV1().NetworkPolicies(e.ns).Get(ctx, NetworkPolicyName, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading NetworkPolicy %s/%s: %w", e.ns, NetworkPolicyName, err)
	}
	if e.opt.NetworkPolicy == "require" {
		return fmt.Errorf("NetworkPolicy %s/%s is missing and --network-policy is require: apply deploy/kubernetes/networkpolicy.yaml, or let pybox create it (--network-policy create)", e.ns, NetworkPolicyName)
	}
	_, err = e.cs.NetworkingV1().NetworkPolicies(e.ns).Create(ctx, DenyAllPolicy(e.ns), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating NetworkPolicy %s/%s (or apply deploy/kubernetes/networkpolicy.yaml and use --network-policy require): %w", e.ns, NetworkPolicyName, err)
	}
	return nil
}

// DenyAllPolicy is the NetworkPolicy of the sandbox pods: nothing in,
// nothing out.
func DenyAllPolicy(ns string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/name": "pybox"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: "true"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

func (e *kubeEngine) Host() string { return e.cfg.Host }

// podSpec turns a container spec into the sandbox's pod: the same walls,
// written in the pod spec.
func (e *kubeEngine) pod(s containerSpec) (*corev1.Pod, error) {
	uid, gid, err := numericUser(s.User)
	if err != nil {
		return nil, err
	}
	lbl, ann := map[string]string{}, map[string]string{}
	for k, v := range s.Labels {
		lbl[k] = labelValue(v)
		ann[k] = v
	}
	tol, _ := tolerations(e.opt.Tolerations)
	f, t := false, true
	deadline := int64(s.Lifetime.Seconds()) + 1
	grace := int64(0)
	mem := resource.NewQuantity(s.MemoryBytes, resource.BinarySI)
	cpu := resource.NewMilliQuantity(s.NanoCPUs/1e6, resource.DecimalSI)
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	switch {
	case s.Seccomp == "unconfined":
		seccomp = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	case e.opt.SeccompLocalhost != "":
		p := e.opt.SeccompLocalhost
		seccomp = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &p}
	}
	var caps *corev1.Capabilities
	if s.CapDropAll {
		caps = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	addTmpfs := func(name, path string, size int64) {
		q := resource.NewQuantity(size, resource.BinarySI)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: q}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: path})
	}
	names := map[string]string{"/tmp": "tmp", "/mnt/user-data": "user-data", "/mnt/outputs": "outputs"}
	for _, path := range []string{"/tmp", "/mnt/user-data", "/mnt/outputs"} {
		if opts, ok := s.Tmpfs[path]; ok {
			addTmpfs(names[path], path, tmpfsSize(opts))
		}
	}
	if s.ShmBytes > 0 {
		addTmpfs("shm", "/dev/shm", s.ShmBytes)
	}
	var env []corev1.EnvVar
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "pybox-",
			Namespace:    e.ns,
			Labels:       lbl,
			Annotations:  ann,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			Hostname:                      s.Hostname,
			DNSPolicy:                     corev1.DNSDefault,
			NodeSelector:                  e.opt.NodeSelector,
			Tolerations:                   tol,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser:      &uid,
				RunAsGroup:     &gid,
				RunAsNonRoot:   &t,
				SeccompProfile: seccomp,
			},
			Volumes: vols,
			Containers: []corev1.Container{{
				Name:            kubeContainer,
				Image:           s.Image,
				ImagePullPolicy: corev1.PullPolicy(e.opt.ImagePullPolicy),
				Command:         s.Cmd,
				Env:             env,
				WorkingDir:      s.WorkingDir,
				Stdin:           true,
				// As with Docker: the runner's stdin closes when pybox's
				// attach ends, and the runner, and so the pod, with it; a
				// session's stays open for the next call's attach.
				StdinOnce: !s.Persistent,
				TTY:       false,
				SecurityContext: &corev1.SecurityContext{
					Privileged:               &f,
					AllowPrivilegeEscalation: &f,
					ReadOnlyRootFilesystem:   &s.ReadOnly,
					RunAsNonRoot:             &t,
					Capabilities:             caps,
				},
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{
						corev1.ResourceMemory:           *mem,
						corev1.ResourceCPU:              *cpu,
						corev1.ResourceEphemeralStorage: *resource.NewQuantity(e.opt.EphemeralStorage, resource.BinarySI),
					},
					Requests: corev1.ResourceList{
						corev1.ResourceMemory: *mem,
						corev1.ResourceCPU:    *resource.NewMilliQuantity(min(100, s.NanoCPUs/1e6), resource.DecimalSI),
					},
				},
				VolumeMounts:             mounts,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
		},
	}
	if !s.NoNewPrivs {
		p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
	}
	if e.opt.RuntimeClass != "" {
		rc := e.opt.RuntimeClass
		p.Spec.RuntimeClassName = &rc
	}
	if e.owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*e.owner}
	}
	return p, nil
}

// numericUser reads "uid:gid".
func numericUser(u string) (int64, int64, error) {
	var uid, gid int64
	if _, err := fmt.Sscanf(u, "%d:%d", &uid, &gid); err != nil {
		return 0, 0, fmt.Errorf("the sandbox user %q is not uid:gid", u)
	}
	return uid, gid, nil
}

// tmpfsSize reads the size= of tmpfs options.
func tmpfsSize(opts string) int64 {
	for _, o := range strings.Split(opts, ",") {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			var n int64
			fmt.Sscanf(v, "%d", &n)
			return n
		}
	}
	return 64 << 20
}

func (e *kubeEngine) Create(ctx context.Context, s containerSpec) (string, error) {
	p, err := e.pod(s)
	if err != nil {
		return "", err
	}
	got, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return got.Name, nil
}

// waitRunning waits until the pod's container runs, and says why not when
// it never will.
func (e *kubeEngine) waitRunning(ctx context.Context, name string) error {
	w, err := e.cs.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return err
	}
	defer w.Stop()
	// A pod that became Running before the watch began shows in its first event.
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the sandbox pod did not start in time: %w", ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch of the sandbox pod ended")
			}
			if ev.Type == watch.Deleted {
				return fmt.Errorf("%w: the sandbox pod was deleted as it started", errGone)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			done, err := podStarted(p)
			if done {
				return err
			}
		}
	}
}

// podStarted says whether a pod's container has started (or never will).
func podStarted(p *corev1.Pod) (bool, error) {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name != kubeContainer {
			continue
		}
		if c.State.Running != nil {
			return true, nil
		}
		if t := c.State.Terminated; t != nil {
			return true, fmt.Errorf("the sandbox container ended as it started: %s (exit %d) %s", t.Reason, t.ExitCode, t.Message)
		}
		if w := c.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull", "InvalidImageName":
				return true, fmt.Errorf("%w: %s: %s", errImageMissing, w.Reason, w.Message)
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return true, fmt.Errorf("the cluster could not start the sandbox container: %s: %s", w.Reason, w.Message)
			}
		}
	}
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, fmt.Errorf("the sandbox pod ended as it started: %s %s", p.Status.Reason, p.Status.Message)
	}
	return false, nil
}

// kubeStream is an attach to a pod's container: stdin through a pipe,
// stdout and stderr as they come.
type kubeStream struct {
	key    []byte // the runner's stdout is sealed with it: a pod's log keeps stdout
	stdin  *io.PipeWriter
	outR   *io.PipeReader
	errR   *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (s *kubeStream) Stdin() io.Writer { return s.stdin }
func (s *kubeStream) seal(key []byte)  { s.key = key }
func (s *kubeStream) Close() error {
	s.stdin.Close()
	s.cancel()
	return nil
}
func (s *kubeStream) Demux(stdout, stderr io.Writer) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); io.Copy(stderr, s.errR) }()
	if s.key != nil {
		stdout = newUnsealer(s.key, stdout)
	}
	_, err := io.Copy(stdout, s.outR)
	wg.Wait()
	<-s.done
	if err == nil {
		err = s.err
	}
	return err
}

func (e *kubeEngine) Launch(ctx context.Context, id string) (stream, error) {
	if err := e.waitRunning(ctx, id); err != nil {
		return nil, err
	}
	req := e.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.ns).Name(id).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: kubeContainer, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(e.cfg, "POST", req.URL())
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	st := &kubeStream{stdin: inW, outR: outR, errR: errR, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(st.done)
		err := exec.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: errW})
		st.err = err
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		errW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	return st, nil
}

// Kill kills the sandbox: a pod's containers are killed by deleting it.
func (e *kubeEngine) Kill(ctx context.Context, id string) error {
	return e.Remove(ctx, id)
}

func (e *kubeEngine) get(ctx context.Context, id string) (*corev1.Pod, error) {
	p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, id, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %v", errGone, err)
	}
	return p, err
}

func containerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == kubeContainer {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func (e *kubeEngine) Wait(ctx context.Context, id string) (int, error) {
	for {
		p, err := e.get(ctx, id)
		if err != nil {
			return -1, err
		}
		if c := containerStatus(p); c != nil && c.State.Terminated != nil {
			return int(c.State.Terminated.ExitCode), nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (e *kubeEngine) Inspect(ctx context.Context, id string) (containerState, error) {
	p, err := e.get(ctx, id)
	if err != nil {
		return containerState{}, err
	}
	raw, _ := json.Marshal(p)
	st := containerState{Raw: raw, Removing: p.DeletionTimestamp != nil}
	if c := containerStatus(p); c != nil {
		st.Running = c.State.Running != nil
		if t := c.State.Terminated; t != nil {
			st.ExitCode = int(t.ExitCode)
			st.OOMKilled = t.Reason == "OOMKilled"
		}
	}
	return st, nil
}

// History reads the pod's status until its container ended or the pod is
// gone, or ctx ends. Kubernetes keeps no record of signals sent: a pod
// deleted by someone else shows as removed, with the kill its deletion
// made.
func (e *kubeEngine) History(ctx context.Context, id string, since time.Time) (containerHistory, error) {
	var h containerHistory
	for {
		p, err := e.get(ctx, id)
		switch {
		case errors.Is(err, errGone):
			h.Removed = true
			if !h.Died {
				h.Kills = append(h.Kills, 9)
			}
			return h, nil
		case err != nil:
			if h.Died && errors.Is(err, context.DeadlineExceeded) {
				return h, nil
			}
			return h, err
		}
		if p.DeletionTimestamp != nil && !h.Died {
			h.Kills = append(h.Kills, 9)
			h.Removed = true
			return h, nil
		}
		if c := containerStatus(p); c != nil && c.State.Terminated != nil {
			h.Died, h.ExitCode = true, int(c.State.Terminated.ExitCode)
			h.OOM = c.State.Terminated.Reason == "OOMKilled"
			if p.Status.Reason == "DeadlineExceeded" {
				h.Kills = append(h.Kills, 9)
			}
			return h, nil
		}
		select {
		case <-ctx.Done():
			return h, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Remove deletes the pod at once (no grace: the runner has nothing to
// save); one already gone is no error.
func (e *kubeEngine) Remove(ctx context.Context, id string) error {
	zero := int64(0)
	bg := metav1.DeletePropagationBackground
	err := e.cs.CoreV1().Pods(e.ns).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: &zero, PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

func (e *kubeEngine) List(ctx context.Context, want map[string]string) ([]listedContainer, error) {
	sel := map[string]string{}
	for k, v := range want {
		sel[k] = labelValue(v)
	}
	pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
	if err != nil {
		return nil, err
	}
	out := make([]listedContainer, 0, len(pods.Items))
	for _, p := range pods.Items {
		// The values as pybox wrote them; a label only where no
		// annotation says more.
		l := map[string]string{}
		for k, v := range p.Labels {
			l[k] = v
		}
		for k, v := range p.Annotations {
			if _, ok := p.Labels[k]; ok {
				l[k] = v
			}
		}
		ok := true
		for k, v := range want {
			ok = ok && l[k] == v
		}
		if !ok {
			continue
		}
		state := strings.ToLower(string(p.Status.Phase))
		if c := containerStatus(&p); c != nil && c.State.Running != nil {
			state = "running"
		}
		out = append(out, listedContainer{ID: p.Name, Labels: l, State: state, Created: p.CreationTimestamp.Time})
	}
	return out, nil
}

func (e *kubeEngine) Ping(ctx context.Context) (string, error) {
	v, err := e.cs.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

func (e *kubeEngine) ServerInfo(ctx context.Context) (EngineInfo, error) {
	v, err := e.cs.Discovery().ServerVersion()
	if err != nil {
		return EngineInfo{}, err
	}
	info := EngineInfo{Product: "Kubernetes", ServerVersion: v.GitVersion, APIVersion: "v1", OS: v.Platform, DefaultRT: "default", Namespace: e.ns}
	if rcs, err := e.cs.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{}); err == nil {
		for _, rc := range rcs.Items {
			info.Runtimes = append(info.Runtimes, rc.Name)
		}
	}
	return info, nil
}

// ImageInspect looks for the image among those the nodes report having.
// A cluster that pulls images may not have it yet: with a pull policy
// other than Never, an image no node has is taken as present (its pull
// happens with the first pod), without its labels.
func (e *kubeEngine) ImageInspect(ctx context.Context, ref string) (imageInfo, error) {
	nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return imageInfo{ID: ref, NoLabels: true}, nil // a Role without nodes: trust the pull
		}
		return imageInfo{}, err
	}
	names := imageNames(ref)
	for _, n := range nodes.Items {
		for _, img := range n.Status.Images {
			for _, have := range img.Names {
				if names[have] {
					// Nodes do not report an image's labels.
					return imageInfo{ID: have, Size: img.SizeBytes, NoLabels: true}, nil
				}
			}
		}
	}
	if e.opt.ImagePullPolicy == string(corev1.PullNever) {
		return imageInfo{}, fmt.Errorf("%w: no node has %s", errImageMissing, ref)
	}
	return imageInfo{ID: ref, NoLabels: true}, nil
}

// imageNames are the names a node may give an image reference.
func imageNames(ref string) map[string]bool {
	n := map[string]bool{ref: true}
	if !strings.Contains(ref, "/") {
		n["docker.io/library/"+ref] = true
	} else if first, _, _ := strings.Cut(ref, "/"); !strings.ContainsAny(first, ".:") && first != "localhost" {
		n["docker.io/"+ref] = true
	}
	return n
}

// Sessions on Kubernetes are shared by every pybox replica: a session's
// pod carries its key (a hash of its id) as a label and its owner as an
// annotation, any replica finds it by the key, attaches for one call and
// detaches, and a lease in the pod's annotations, taken with the API
// server's optimistic concurrency, keeps two replicas from running calls in
// it at once.
const (
	// LabelSessionKey is the hash of a session's id, to find its pod by.
	LabelSessionKey = "pybox.session-key"
	// AnnotationSessionOwner is who the session answers to.
	AnnotationSessionOwner = "pybox.session-owner"
	// annotationLease is "holder until-unix-nanos" while a call runs.
	annotationLease = "pybox.session-lease"
	// annotationLastUsed is when the session's last call ended (RFC 3339).
	annotationLastUsed = "pybox.session-last-used"
)

// errLeased means another replica holds the session's lease.
var errLeased = errors.New("the session is running a call of another pybox replica")

// sessionStore is what shared sessions ask of an engine.
type sessionStore interface {
	// FindSession returns the running pod whose session key is key, with
	// its annotations; errGone when none is.
	FindSession(ctx context.Context, key string) (string, map[string]string, error)
	// Lease takes the session pod's lease for holder until a time, or
	// gives it back (until zero) and records the last use; errBusy while
	// another holder's lease runs (errLeased).
	Lease(ctx context.Context, id, holder string, until time.Time) error
	// LastUsed is when the session's last call ended (or it started).
	LastUsed(ctx context.Context, id string) (time.Time, error)
}

func (e *kubeEngine) LastUsed(ctx context.Context, id string) (time.Time, error) {
	p, err := e.get(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	if t, err := time.Parse(time.RFC3339Nano, p.Annotations[annotationLastUsed]); err == nil {
		return t, nil
	}
	return p.CreationTimestamp.Time, nil
}

func (e *kubeEngine) FindSession(ctx context.Context, key string) (string, map[string]string, error) {
	pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(map[string]string{LabelManaged: "true", LabelSessionKey: key}).String()})
	if err != nil {
		return "", nil, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return p.Name, p.Annotations, nil
		}
	}
	return "", nil, errGone
}

func (e *kubeEngine) Lease(ctx context.Context, id, holder string, until time.Time) error {
	for {
		p, err := e.get(ctx, id)
		if err != nil {
			return err
		}
		if cur := p.Annotations[annotationLease]; cur != "" {
			h, exp, _ := strings.Cut(cur, " ")
			var n int64
			fmt.Sscanf(exp, "%d", &n)
			if h != holder && time.Now().UnixNano() < n {
				return errLeased
			}
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		if until.IsZero() {
			delete(p.Annotations, annotationLease)
			p.Annotations[annotationLastUsed] = time.Now().UTC().Format(time.RFC3339Nano)
		} else {
			p.Annotations[annotationLease] = fmt.Sprintf("%s %d", holder, until.UnixNano())
		}
		// The update carries the resourceVersion read: it fails with a
		// conflict if anyone changed the pod since.
		_, err = e.cs.CoreV1().Pods(e.ns).Update(ctx, p, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		return err
	}
}
