package sandbox

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// poolProbe prints what the code can see of its surroundings, and the id of
// its container, and leaves a mark for a later call to find.
const poolProbe = `import json, os, sys
cg = open("/proc/self/cgroup").read()
print(json.dumps({
    "globals": sorted(globals()),
    "argv": sys.argv, "path": sys.path, "cwd": os.getcwd(),
    "env": dict(os.environ),
    "tmp": sorted(os.listdir("/tmp")), "shm": sorted(os.listdir("/dev/shm")),
    "outputs": sorted(os.listdir("/mnt/outputs")), "user_data": sorted(os.listdir("/mnt/user-data")),
    "uid": os.getuid(), "main_file": __file__,
    "container": cg.strip().splitlines()[-1].rsplit("/", 1)[-1],
}))
open("/tmp/mark", "w").write("left by an earlier call")
`

type probeView struct {
	Globals   []string
	Argv      []string
	Path      []string
	Cwd       string
	Env       map[string]string
	Tmp       []string
	Shm       []string
	Outputs   []string
	UserData  []string `json:"user_data"`
	UID       int
	MainFile  string `json:"main_file"`
	Container string
}

func runProbe(t *testing.T, s *Sandbox) probeView {
	t.Helper()
	res := s.Run(context.Background(), Request{Code: poolProbe})
	var v probeView
	if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
		t.Fatalf("probe: %v; stdout %q stderr %q", err, res.Stdout, res.Stderr)
	}
	return v
}

func waitPool(t *testing.T, s *Sandbox, n int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); s.PoolReady() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not fill to %d", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPoolIsFreshAndInvisible: pooled sandboxes serve one call each, and
// nothing of their preparation shows: the code sees what a cold run sees.
func TestPoolIsFreshAndInvisible(t *testing.T) {
	cold := newTest(t, Options{PoolSize: -1})
	want := runProbe(t, cold)
	warm := newTest(t, Options{PoolSize: 2})
	seen := map[string]bool{want.Container: true}
	for i := range 6 {
		waitPool(t, warm, 2)
		got := runProbe(t, warm)
		if seen[got.Container] || got.Container == "" {
			t.Errorf("call %d ran in container %q, which served an earlier call", i, got.Container)
		}
		seen[got.Container] = true
		want.Container = got.Container
		// Each sandbox has a uid of its own from the range.
		if got.UID < DefaultUIDBase || got.UID >= DefaultUIDBase+DefaultUIDCount || got.UID == want.UID {
			t.Errorf("call %d ran as uid %d; want a uid of its own from the range", i, got.UID)
		}
		want.UID = got.UID
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("call %d in a pooled sandbox sees something else than a cold run (-cold +pooled):\n%s", i, diff)
		}
	}
	res := warm.Run(context.Background(), Request{Code: "a = 1\nb = 2\nprint(c)\n"})
	if n := strings.Count(res.Stderr, "  File "); n != 1 || !strings.Contains(res.Stderr, `File "main.py", line 3, in <module>`) {
		t.Errorf("a traceback in a pooled sandbox:\n%s", res.Stderr)
	}
	res = warm.Run(context.Background(), Request{Code: "import sys, pandas\nprint('pandas' in sys.modules)"})
	if res.Stdout != "True\n" {
		t.Errorf("pandas: %q %q", res.Stdout, res.Stderr)
	}
}
