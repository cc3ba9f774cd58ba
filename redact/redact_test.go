package redact_test

import (
	"context"
	"encoding/base64"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pybox/pybox/redact"
	"github.com/pybox/pybox/redact/redacttest"
)

func TestRedact(t *testing.T) {
	known := "hunter2-correct-horse"
	r := redact.MustNew(redact.Options{Values: []string{known}, Environ: []string{"MY_API_KEY=env-secret-value-123", "PATH=/usr/bin", "SHORT_TOKEN=abc"}})
	tests := []struct {
		name, in, want string
	}{
		{"known value", "pw: " + known + "!", "pw: [REDACTED:known_secret]!"},
		{"known value base64", base64.StdEncoding.EncodeToString([]byte(known)), "[REDACTED:known_secret]"},
		{"env value", "x env-secret-value-123 y", "x [REDACTED:known_secret] y"},
		{"short env value kept", "abc", "abc"},
		{"anthropic", "ANTHROPIC_API_KEY=sk-ant-api03-" + strings.Repeat("xY", 45), "ANTHROPIC_API_KEY=[REDACTED:anthropic_api_key]"},
		{"aws secret keeps its name", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = [REDACTED:aws_secret_access_key]"},
		{"url credentials keep user and host", "postgres://admin:s3cr3tpass@db:5432/x", "postgres://admin:[REDACTED:url_credentials]@db:5432/x"},
		{"bearer keeps the scheme", "Authorization: Bearer abcdef0123456789abcdef", "Authorization: Bearer [REDACTED:bearer_token]"},
		{"plain text kept", "mean 3.663, https://example.com/a?b=c", "mean 3.663, https://example.com/a?b=c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.String(tt.in); got != tt.want {
				t.Errorf("String(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestRecall runs the seeded corpus through the redactor, one line at a
// time and all at once: no secret, and no 12-byte part of one, survives.
func TestRecall(t *testing.T) {
	known := redacttest.Known(7, 8)
	r := redact.MustNew(redact.Options{Values: known})
	corpus := redacttest.Corpus(42, 8, known)
	if kinds := len(redacttest.Kinds()); kinds < 25 {
		t.Fatalf("corpus has %d kinds; want at least 25", kinds)
	}
	var all strings.Builder
	missed := map[string]int{}
	for _, s := range corpus {
		all.WriteString(s.Text + "\n")
		if redacttest.Leaked(r.String(s.Text), s.Secret) {
			missed[s.Kind]++
			t.Errorf("%s: %q -> %q", s.Kind, s.Text, r.String(s.Text))
		}
	}
	out := r.String(all.String())
	for _, s := range corpus {
		if redacttest.Leaked(out, s.Secret) {
			t.Errorf("%s: survived in the whole text", s.Kind)
		}
	}
	t.Logf("%d samples of %d kinds; missed per kind: %v", len(corpus), len(redacttest.Kinds()), missed)
}

// TestPrecision: benign output comes back byte for byte.
func TestPrecision(t *testing.T) {
	r := redact.MustNew(redact.Options{Values: redacttest.Known(7, 8)})
	benign := redacttest.Benign(1)
	if len(benign) < 300 {
		t.Fatalf("%d benign samples; want at least 300", len(benign))
	}
	for _, b := range benign {
		if got := r.String(b); got != b {
			t.Errorf("benign text changed:\n  in:  %q\n  out: %q", b, got)
		}
	}
}

func TestEncodingsFindEmbeddedBase64(t *testing.T) {
	v := "p@ss/w0rd+secret"
	r := redact.MustNew(redact.Options{Values: []string{v}})
	for k := 0; k < 3; k++ {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
			text := enc.EncodeToString([]byte(strings.Repeat("z", k) + v + "...more data"))
			got := r.String(text)
			if !strings.Contains(got, "[REDACTED:known_secret]") {
				t.Errorf("alignment %d: %q -> %q; want the value's part redacted", k, text, got)
			}
		}
	}
}

func TestOptions(t *testing.T) {
	sk := "sk-ant-api03-" + strings.Repeat("a1B2", 10)
	tests := []struct {
		name string
		opt  redact.Options
		in   string
		want string
	}{
		{"user pattern", redact.Options{Patterns: []redact.Pattern{{Kind: "employee_id", Regex: `EMP-\d{6}`}}}, "id EMP-123456 ok", "id [REDACTED:employee_id] ok"},
		{"user pattern with a secret group", redact.Options{Patterns: []redact.Pattern{{Kind: "pin", Regex: `pin=(?P<secret>\d{4})`}}}, "pin=1234", "pin=[REDACTED:pin]"},
		{"rule turned off", redact.Options{Disable: []string{"url_credentials"}}, "ftp://a:b@c", "ftp://a:b@c"},
		{"gitleaks turned off, pybox rule still on", redact.Options{Disable: []string{"gitleaks"}}, sk, "[REDACTED:anthropic_api_key]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := redact.New(tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.String(tt.in); got != tt.want {
				t.Errorf("String(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
	for _, bad := range []redact.Pattern{{Kind: "x", Regex: "("}, {Kind: "", Regex: "a"}, {Kind: "x y", Regex: "a"}, {Kind: "e", Regex: "a*"}} {
		if _, err := redact.New(redact.Options{Patterns: []redact.Pattern{bad}}); err == nil {
			t.Errorf("New accepted the pattern %+v", bad)
		}
	}
}

func TestLoadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.json")
	os.WriteFile(p, []byte(`{"values": ["file-secret-1"], "patterns": [{"kind": "ticket", "regex": "TCK-[0-9]+"}], "disable": ["jwt"]}`), 0o600)
	var opt redact.Options
	if err := redact.LoadFile(p, &opt); err != nil {
		t.Fatal(err)
	}
	r := redact.MustNew(opt)
	if got := r.String("file-secret-1 TCK-42"); got != "[REDACTED:known_secret] [REDACTED:ticket]" {
		t.Errorf("String() = %q", got)
	}
	os.WriteFile(p, []byte(`{"valuez": []}`), 0o600)
	if err := redact.LoadFile(p, &opt); err == nil {
		t.Error("LoadFile accepted an unknown field")
	}
}

// FuzzRedact plants secrets of every kind anywhere in arbitrary text: none
// survives, the output is valid UTF-8 when the input is, and redacting twice
// changes nothing.
func FuzzRedact(f *testing.F) {
	known := redacttest.Known(3, 4)
	r := redact.MustNew(redact.Options{Values: known})
	corpus := redacttest.Corpus(5, 2, known)
	f.Add("hello", "world", uint8(0), uint8(1))
	f.Add("a\xff", "==", uint8(7), uint8(40))
	f.Add("Authorization: Bearer ", "@host", uint8(50), uint8(3))
	f.Fuzz(func(t *testing.T, before, after string, i, j uint8) {
		a := corpus[int(i)%len(corpus)]
		b := corpus[int(j)%len(corpus)]
		// A token glued to a word character before it is another word (the
		// rules for generic shapes such as sk-... need a boundary), so a
		// space separates the planted text from what precedes it.
		in := before + " " + a.Text + after + " " + b.Text + "\n" + before
		got := r.String(in)
		for _, s := range []redacttest.Sample{a, b} {
			if redacttest.Leaked(got, s.Secret) {
				t.Fatalf("%s survived: %q -> %q", s.Kind, in, got)
			}
		}
		if utf8.ValidString(in) && !utf8.ValidString(got) {
			t.Fatalf("redacting broke UTF-8: %q", got)
		}
		if again := r.String(got); again != got {
			t.Fatalf("redacting twice changed the text:\n%q\n%q", got, again)
		}
	})
}

// BenchmarkRedact1MiB measures redacting 1 MiB of typical output at the
// default decoding depth and at gitleaks' command-line depth of 5, and of
// keyword-dense output.
func BenchmarkRedact1MiB(b *testing.B) {
	for _, bc := range []struct {
		name  string
		dense bool
		depth int
	}{
		{"typical/decode-depth-2", false, redact.DefaultDecodeDepth},
		{"typical/decode-depth-5", false, 5},
		{"keyword-dense/decode-depth-2", true, redact.DefaultDecodeDepth},
	} {
		text := redacttest.Output(1<<20, bc.dense)
		b.Run(bc.name, func(b *testing.B) {
			r := redact.MustNew(redact.Options{Values: redacttest.Known(1, 4), Environ: os.Environ(), DecodeDepth: bc.depth})
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for range b.N {
				r.String(text)
			}
		})
	}
}

// BenchmarkRedactKinds measures the three kinds of text the README's
// redaction table reports: plain output, credential-dense lines and
// base64.
func BenchmarkRedactKinds(b *testing.B) {
	r := redact.MustNew(redact.Options{Environ: os.Environ()})
	for _, bc := range []struct {
		name string
		text string
	}{
		{"plain", redacttest.Output(1<<20, false)},
		{"credential-dense", redacttest.CredentialDense(1 << 20)},
		{"base64", redacttest.Base64(1 << 20)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.text)))
			for range b.N {
				r.String(bc.text)
			}
		})
	}
}

// TestSecretInLongEncodedRun: a token encoded inside a long one-line
// base64 text is found wherever it sits, across the pieces a long run is
// decoded in.
func TestSecretInLongEncodedRun(t *testing.T) {
	r := redact.MustNew(redact.Options{})
	token := "ghp_" + strings.Repeat("A1b2C3d4E5", 4)[:36]
	rng := rand.New(rand.NewSource(5))
	for _, at := range []int{0, 1, 2, 3000, 3071, 3072, 3073, 3100, 6000, 50001} {
		raw := make([]byte, 60000)
		for i := range raw {
			raw[i] = byte('a' + rng.Intn(26)) // text, as a log would hold
		}
		copy(raw[at:], " "+token+" ")
		text := "payload=" + base64.StdEncoding.EncodeToString(raw)
		got := r.String(text)
		dec, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(got, "payload="))
		if err == nil && strings.Contains(string(dec), token) {
			t.Errorf("token at byte %d survived encoded", at)
			continue
		}
		if !strings.Contains(got, "[REDACTED:") {
			t.Errorf("token at byte %d: nothing redacted", at)
		}
	}
}

// TestContextEndsRedaction: redaction gives up when its context ends and
// says so, rather than handing back text it did not finish.
func TestContextEndsRedaction(t *testing.T) {
	r := redact.MustNew(redact.Options{})
	text := redacttest.CredentialDense(8 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	out, err := r.StringContext(ctx, text)
	if !errors.Is(err, context.DeadlineExceeded) || out != "" {
		t.Fatalf("StringContext after its deadline = %d bytes, %v; want nothing and the deadline's error", len(out), err)
	}
	if _, err := r.MaskContext(ctx, text); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("MaskContext after its deadline: %v", err)
	}
}

// TestMaskKeepsLength: masking a binary file's secrets keeps its layout.
func TestMaskKeepsLength(t *testing.T) {
	known := "hunter2-correct-horse"
	r := redact.MustNew(redact.Options{Values: []string{known}})
	token := "ghp_" + strings.Repeat("Zq9x", 9)
	in := "\x00\x01PNG\xff" + known + "\x00" + token + "\xfe tail"
	out, err := r.MaskContext(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) || strings.Contains(out, known) || strings.Contains(out, token) || !strings.HasSuffix(out, "\xfe tail") {
		t.Fatalf("MaskContext(%q) = %q; want the same length, both secrets starred", in, out)
	}
}
