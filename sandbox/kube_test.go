package sandbox

import (
	"bytes"
	"crypto/sha3"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pybox/pybox/internal/testenv"
)

// TestPodSpec: the flags that place a pod reach its spec, labels hold
// values Kubernetes allows while annotations keep pybox's, and only a
// shared session's pod keeps its stdin across attaches.
func TestPodSpec(t *testing.T) {
	e := &kubeEngine{ns: "sandboxes", opt: KubeOptions{
		RuntimeClass: "gvisor", NodeSelector: map[string]string{"pool": "sandboxes"},
		Tolerations: []string{"dedicated=sandbox:NoSchedule", "spot:NoExecute"}, ImagePullPolicy: "Never", EphemeralStorage: 32 << 20,
	}, owner: &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "pybox-0", UID: "u-1"}}
	s := (&Sandbox{opt: resolved{Options: Options{Image: "img", MemoryBytes: 256 << 20, NanoCPUs: 1e9, TmpfsBytes: 64 << 20, OutputsTmpfsBytes: 64 << 20, MaxInputBytes: 1 << 20}}, owner: "host/12/3456"}).containerSpec("call1", "2000000007:2000000007")
	s.Lifetime = 90 * time.Second
	p, err := e.pod(s)
	if err != nil {
		t.Fatal(err)
	}
	spec := p.Spec
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "gvisor" || spec.NodeSelector["pool"] != "sandboxes" {
		t.Errorf("runtime class %v, node selector %v", spec.RuntimeClassName, spec.NodeSelector)
	}
	want := []corev1.Toleration{
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "sandbox", Effect: corev1.TaintEffectNoSchedule},
		{Key: "spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	if len(spec.Tolerations) != 2 || spec.Tolerations[0] != want[0] || spec.Tolerations[1] != want[1] {
		t.Errorf("tolerations %+v; want %+v", spec.Tolerations, want)
	}
	if *spec.ActiveDeadlineSeconds != 91 || p.Namespace != "sandboxes" || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Name != "pybox-0" {
		t.Errorf("deadline %d, namespace %q, owners %v", *spec.ActiveDeadlineSeconds, p.Namespace, p.OwnerReferences)
	}
	if p.Labels[LabelOwner] != "host_12_3456" || p.Annotations[LabelOwner] != "host/12/3456" || p.Labels[LabelCall] != "call1" {
		t.Errorf("labels %v, annotations %v", p.Labels, p.Annotations)
	}
	c := spec.Containers[0]
	if !c.StdinOnce || c.ImagePullPolicy != corev1.PullNever || *spec.SecurityContext.RunAsUser != 2000000007 {
		t.Errorf("stdinOnce %v, pull %v, uid %v", c.StdinOnce, c.ImagePullPolicy, *spec.SecurityContext.RunAsUser)
	}
	s.Persistent = true
	if p, _ = e.pod(s); p.Spec.Containers[0].StdinOnce {
		t.Error("a shared session's pod closes its stdin with the first attach")
	}
	if _, err := tolerations([]string{"nocolon"}); err == nil {
		t.Error("a toleration without an effect was taken")
	}
	if v := labelValue(strings.Repeat("a/", 50)); len(v) > 63 || strings.ContainsAny(v, "/") {
		t.Errorf("label value %q", v)
	}
}

// TestUnseal: what the runner seals, the stream unseals, across blocks and
// in pieces of any size.
func TestUnseal(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	plain := bytes.Repeat([]byte("pybox sealed stream "), 10000) // 200 KB: several blocks
	var sealed bytes.Buffer
	seal := newUnsealer(key, &sealed) // XOR is its own inverse
	seal.Write(plain)
	if bytes.Contains(sealed.Bytes(), []byte("pybox sealed")) {
		t.Fatal("the sealed stream shows its text")
	}
	var out bytes.Buffer
	u := newUnsealer(key, &out)
	b := sealed.Bytes()
	for i := 0; i < len(b); {
		n := min(1+i%70001, len(b)-i)
		u.Write(b[i : i+n])
		i += n
	}
	if !bytes.Equal(out.Bytes(), plain) {
		t.Fatal("unsealed in pieces, the stream differs")
	}
	// The runner's keystream (Python's hashlib) is the same: block 3's
	// last bytes, computed both ways.
	py, err := exec.Command("python3", "-c", "import hashlib; print(hashlib.shake_256(bytes([7]*32) + (3).to_bytes(8, 'little')).digest(1 << 16)[-16:].hex())").Output()
	if err != nil {
		if testenv.Required() {
			t.Fatalf("python3, to check the runner's keystream: %v", err)
		}
		t.Skipf("no python3 here: %v", err)
	}
	in := append(bytes.Repeat([]byte{7}, 32), 3, 0, 0, 0, 0, 0, 0, 0)
	if got := hex.EncodeToString(sha3.SumSHAKE256(in, sealBlock)[sealBlock-16:]); got != strings.TrimSpace(string(py)) {
		t.Fatalf("Go's keystream %s, Python's %s", got, py)
	}
}
