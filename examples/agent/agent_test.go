package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pybox/pybox/internal/testenv"
	"github.com/pybox/pybox/sandbox"
)

// scripted is a Model that replies from a script and records its inputs.
type scripted struct {
	replies []Reply
	inputs  []string
	finals  []bool
}

func (s *scripted) Next(_ context.Context, input string, final bool) (Reply, error) {
	s.inputs = append(s.inputs, input)
	s.finals = append(s.finals, final)
	if len(s.replies) == 0 {
		return Reply{}, fmt.Errorf("the script ran out")
	}
	r := s.replies[0]
	s.replies = s.replies[1:]
	return r, nil
}

// pybox starts the real server for the loop to call.
func pybox(t *testing.T) *pyboxRunner {
	t.Helper()
	image := testenv.Image(sandbox.DefaultImage)
	testenv.Engine(t, image)
	bin := filepath.Join(t.TempDir(), "pybox")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/pybox").CombinedOutput(); err != nil {
		t.Fatalf("building pybox: %v\n%s", err, out)
	}
	r, err := startPybox(context.Background(), bin, []string{"PYBOX_IMAGE=" + image, "PYBOX_POOL=0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

const primesStd = `import numpy as np
from sympy import prime
p = np.array([prime(i) for i in range(1, 1001)])
print(round(float(p.std()), 6))
`

func TestLoopFailsTwiceThenSucceeds(t *testing.T) {
	r := pybox(t)
	m := &scripted{replies: []Reply{
		{Code: "import numpy as np\nprint(np.std(primes))"}, // NameError
		{Code: "from sympy import prime\nprint(prime(0))"},  // ValueError
		{Code: primesStd}, // works
		{Answer: "The standard deviation is 2259.9 (population)."}, // answers
	}}
	out, err := Answer(context.Background(), m, r, "What is the standard deviation of the first 1000 primes?")
	if err != nil {
		t.Fatal(err)
	}
	if out.Attempts != 3 || !out.Verified || strings.HasPrefix(out.Answer, BestEstimate) {
		t.Errorf("outcome %+v; want 3 attempts, verified, an unmarked answer", out)
	}
	// Each failure went back whole: the full traceback, not a summary.
	if !strings.Contains(m.inputs[1], "Traceback (most recent call last)") || !strings.Contains(m.inputs[1], "NameError: name 'primes' is not defined") || !strings.Contains(m.inputs[1], `"exit_code":1`) {
		t.Errorf("the first failure fed back: %q", m.inputs[1])
	}
	if !strings.Contains(m.inputs[2], "ValueError") || !strings.Contains(m.inputs[2], "attempt 2 of 3") {
		t.Errorf("the second failure fed back: %q", m.inputs[2])
	}
	if !strings.Contains(m.inputs[3], "The code ran") || !strings.Contains(m.inputs[3], `"exit_code":0`) {
		t.Errorf("the success fed back: %q", m.inputs[3])
	}
	t.Logf("the sandbox computed: %s", m.inputs[3])
}

func TestLoopNeverSucceeds(t *testing.T) {
	r := pybox(t)
	m := &scripted{replies: []Reply{
		{Code: "1/0"},
		{Code: "raise RuntimeError('still broken')"},
		{Code: "import sys\nsys.exit(2)"},
		{Code: "print('a fourth try the agent must not run')", Answer: "About 2260."},
	}}
	out, err := Answer(context.Background(), m, r, "What is the standard deviation of the first 1000 primes?")
	if err != nil {
		t.Fatal(err)
	}
	if out.Attempts != 3 || out.Verified {
		t.Errorf("outcome %+v; want 3 attempts, none verified", out)
	}
	if !strings.HasPrefix(out.Answer, BestEstimate+": About 2260.") {
		t.Errorf("answer %q; want it marked as a best estimate", out.Answer)
	}
	if !m.finals[3] || m.finals[2] {
		t.Errorf("finals %v; only the fourth request may demand an answer without code", m.finals)
	}
	if !strings.Contains(m.inputs[3], "give your best estimate") || !strings.Contains(m.inputs[3], `"exit_code":2`) {
		t.Errorf("the last input: %q", m.inputs[3])
	}
}
