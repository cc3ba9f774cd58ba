package redacttest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand"
	"strings"
)

// The kinds of text the redaction benchmarks measure (redact's
// BenchmarkRedactKinds and pybox bench redact).

// Output is what analysis code prints: data frames, arrays, logs,
// prose and links, with a secret now and then. dense puts a secret-looking
// keyword ("key=") on every fifth line, the worst case for the rules that
// run near keywords.
func Output(size int, dense bool) string {
	rng := rand.New(rand.NewSource(9))
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		switch i % 5 {
		case 0:
			fmt.Fprintf(&b, "%5d  %-10s  %10.4f  %10.4f  %8d\n", i, []string{"north", "south", "east", "west"}[i%4], rng.NormFloat64()*100, rng.Float64(), rng.Intn(100000))
		case 1:
			fmt.Fprintf(&b, "[%.8f %.8f %.8f %.8f]\n", rng.Float64(), rng.Float64(), rng.Float64(), rng.Float64())
		case 2:
			if dense {
				fmt.Fprintf(&b, "2026-11-29 14:%02d:%02d INFO processed batch %d of 400 (%d rows, key=%d)\n", i%60, i%60, i, rng.Intn(5000), i)
			} else {
				fmt.Fprintf(&b, "2026-11-29 14:%02d:%02d INFO processed batch %d of 400 (%d rows)\n", i%60, i%60, i, rng.Intn(5000))
			}
		case 3:
			b.WriteString("The model converged after 42 iterations; the loss is 0.0031 and the accuracy 97.2%.\n")
		case 4:
			if i%500 == 4 {
				fmt.Fprintf(&b, "debug: using ghp_%036d\n", i)
			} else if i%50 == 9 {
				fmt.Fprintf(&b, "saved https://example.org/data/%d.csv\n", i)
			} else {
				fmt.Fprintf(&b, "%-12s %8.3f %8.3f\n", []string{"mean", "std", "min", "max"}[i%4], rng.Float64()*10, rng.Float64())
			}
		}
	}
	return b.String()[:size]
}

// CredentialDense is size bytes of lines that each assign an API key: the
// slowest kind of text to redact (every line wakes the rules that run near
// keywords, gitleaks' generic-api-key first).
func CredentialDense(size int) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "api_key=sk-ant-api03-%040d%08x\n", i, i*2654435761)
	}
	return b.String()[:size]
}

// Base64 is size bytes of base64 of random bytes in 76-character lines,
// as base64.encodebytes prints it: every line is decoded and looked at
// again.
func Base64(size int) string {
	rng := rand.New(rand.NewSource(3))
	raw := make([]byte, size*3/4+3)
	rng.Read(raw)
	enc := base64.StdEncoding.EncodeToString(raw)
	var b strings.Builder
	for i := 0; i < len(enc) && b.Len() < size; i += 76 {
		b.WriteString(enc[i:min(len(enc), i+76)])
		b.WriteByte('\n')
	}
	return b.String()[:size]
}
