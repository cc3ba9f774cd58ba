package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/rs/zerolog"

	"github.com/pybox/pybox/internal/testenv"
	"github.com/pybox/pybox/redact"
	"github.com/pybox/pybox/redact/redacttest"
	"github.com/pybox/pybox/sandbox"
)

// redactingServer connects a client to a server on the real engine whose
// sandbox and server redact with rd (nil: no redaction anywhere).
func redactingServer(t *testing.T, rd *redact.Redactor, outputLimit int) *client.Client {
	t.Helper()
	image := testenv.Image(sandbox.DefaultImage)
	testenv.Engine(t, image)
	opt := sandbox.Options{Image: image, OutputLimit: outputLimit}
	if rd != nil {
		opt.Redact = rd
	}
	sb, err := sandbox.New(opt, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return connect(t, Options{Runner: sb, Redactor: rd})
}

// printLines returns Python code that prints each line to stdout and to
// stderr; every third line is written in two parts with a flush between.
func printLines(lines []string) string {
	b, _ := json.Marshal(lines)
	return fmt.Sprintf(`import base64, json, sys
lines = json.loads(base64.b64decode(%q).decode())
for i, t in enumerate(lines):
    for stream in (sys.stdout, sys.stderr):
        if i %% 3 == 0 and len(t) > 4:
            k = len(t) // 2
            stream.write(t[:k]); stream.flush()
            stream.write(t[k:] + "\n"); stream.flush()
        else:
            stream.write(t + "\n")
`, base64.StdEncoding.EncodeToString(b))
}

func TestRedactionRecallThroughSandbox(t *testing.T) {
	known := redacttest.Known(11, 8)
	rd := redact.MustNew(redact.Options{Values: known})
	sc := redactingServer(t, rd, 1<<20)
	corpus := redacttest.Corpus(99, 8, known)
	var lines []string
	for _, s := range corpus {
		lines = append(lines, s.Text)
	}
	_, out := call(t, sc, map[string]any{"code": printLines(lines), "timeout": 60})
	if out.ExitCode != 0 || out.Truncated {
		t.Fatalf("exit %d, truncated %v: %.300s", out.ExitCode, out.Truncated, out.Stderr)
	}
	kinds := map[string]bool{}
	caught := 0
	for _, s := range corpus {
		kinds[s.Kind] = true
		ok := true
		for stream, text := range map[string]string{"stdout": out.Stdout, "stderr": out.Stderr} {
			if redacttest.Leaked(text, s.Secret) {
				ok = false
				t.Errorf("%s survived in %s: %q", s.Kind, stream, s.Text)
			}
		}
		if ok {
			caught++
		}
	}
	if n := strings.Count(out.Stdout, "[REDACTED:"); n < len(corpus) {
		t.Errorf("stdout holds %d redactions for %d samples", n, len(corpus))
	}
	t.Logf("recall: %d of %d samples of %d kinds redacted in both streams (%.1f%%)", caught, len(corpus), len(kinds), 100*float64(caught)/float64(len(corpus)))
	if len(kinds) < 25 || len(corpus) < 25*8 {
		t.Errorf("corpus of %d samples of %d kinds; want at least 8 each of 25 kinds", len(corpus), len(kinds))
	}
}

// TestRedactionPrecisionThroughSandbox prints benign output through the
// sandbox: what Go generated comes back byte for byte, and data frames and
// arrays made in the sandbox come back as a run without redaction prints
// them.
func TestRedactionPrecisionThroughSandbox(t *testing.T) {
	rd := redact.MustNew(redact.Options{Values: redacttest.Known(11, 8), Environ: []string{"SOME_API_TOKEN=not-in-any-output-1234"}})
	with := redactingServer(t, rd, 1<<20)
	without := redactingServer(t, nil, 1<<20)

	benign := redacttest.Benign(3)
	_, out := call(t, with, map[string]any{"code": printLines(benign), "timeout": 60})
	want := ""
	for _, b := range benign {
		want += b + "\n"
	}
	if out.Stdout != want || out.Stderr != want {
		for _, b := range benign {
			if !strings.Contains(out.Stdout, b+"\n") {
				t.Errorf("benign text changed: %q", b)
			}
		}
	}

	frames := `import numpy as np, pandas as pd
rng = np.random.default_rng(7)
for i in range(60):
    df = pd.DataFrame(rng.normal(size=(8, 4)) * 10 ** (i % 5), columns=["key", "token", "value", "auth_score"])
    df["id"] = [f"{rng.integers(1e12):x}" for _ in range(8)]
    print(df.describe().round(4).to_string())
    print(df.head(3).to_string())
for i in range(60):
    print(np.array2string(rng.integers(0, 2**62, size=6), separator=", "))
    print(repr(rng.random(5)))
`
	_, got := call(t, with, map[string]any{"code": frames, "timeout": 60})
	_, raw := call(t, without, map[string]any{"code": frames, "timeout": 60})
	if raw.ExitCode != 0 || raw.Stdout == "" {
		t.Fatalf("the frames did not print: %+v", raw)
	}
	if got.Stdout != raw.Stdout {
		gl, rl := strings.Split(got.Stdout, "\n"), strings.Split(raw.Stdout, "\n")
		for i := range min(len(gl), len(rl)) {
			if gl[i] != rl[i] {
				t.Errorf("data frame output changed at line %d:\n  raw:      %q\n  redacted: %q", i, rl[i], gl[i])
				break
			}
		}
	}
	t.Logf("precision: %d benign texts and 240 data frames and arrays, unchanged: %v", len(benign), !t.Failed())
}
