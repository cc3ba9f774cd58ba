package sandbox

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

func TestCapWriter(t *testing.T) {
	tests := []struct {
		name      string
		limit     int
		in        string
		want      string
		truncated bool
	}{
		{name: "empty", limit: 10, in: "", want: ""},
		{name: "fits", limit: 10, in: "hello", want: "hello"},
		{name: "exactly", limit: 10, in: "0123456789", want: "0123456789"},
		{name: "head and tail", limit: 10, in: "0123456789abcdefghij", want: "01234\n[... pybox: output truncated, 10 bytes omitted; the first 5 and last 5 bytes are shown ...]\nfghij", truncated: true},
		{name: "cut character dropped at head", limit: 6, in: "ab€cdefghijklmnop", want: "ab\n[... pybox: 15 bytes omitted; the first 2 and last 0 bytes are shown ...]\n", truncated: true},
		{name: "invalid bytes replaced", limit: 100, in: "a\xffb", want: "a\uFFFDb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte at a time, so a marker or a character split across
			// writes is covered.
			w := newCapWriter(tt.limit, false)
			if _, err := io.Copy(w, iotest.OneByteReader(strings.NewReader(tt.in))); err != nil {
				t.Fatal(err)
			}
			got, trunc, _ := w.Text(nil)
			if tt.name == "cut character dropped at head" {
				// The tail's 3 bytes are "nop": check the head side only.
				if !strings.HasPrefix(got, "ab\n[... pybox: output truncated") || !trunc {
					t.Errorf("Text() = %q, %v; want head %q without the cut €", got, trunc, "ab")
				}
				return
			}
			if got != tt.want || trunc != tt.truncated {
				t.Errorf("Text() = %q, %v; want %q, %v", got, trunc, tt.want, tt.truncated)
			}
			if w.Total() != int64(len(tt.in)) {
				t.Errorf("Total() = %d; want %d", w.Total(), len(tt.in))
			}
		})
	}
}

func TestCapWriterBigWrites(t *testing.T) {
	w := newCapWriter(1000, false)
	for i := 0; i < 100; i++ {
		w.Write(bytes.Repeat([]byte{byte('a' + i%26)}, 777))
	}
	got, trunc, _ := w.Text(nil)
	if !trunc || !strings.HasPrefix(got, strings.Repeat("a", 500)) || !strings.HasSuffix(got, strings.Repeat("v", 500)) {
		t.Errorf("Text() = %.60q...%.60q; want 500 a's, a marker and 500 v's", got, got[len(got)-60:])
	}
	if cap(w.tail) > 4*1000 {
		t.Errorf("tail buffer grew to %d bytes; want it bounded", cap(w.tail))
	}
}

func FuzzCapWriter(f *testing.F) {
	f.Add([]byte("hello world"), 4, 3)
	f.Add([]byte("€€€€€€€€"), 5, 1)
	f.Add([]byte{0xff, 0xfe, 0xc3}, 2, 2)
	f.Fuzz(func(t *testing.T, data []byte, limit, chunk int) {
		if limit < 0 || limit > 1<<16 || chunk <= 0 || chunk > 64 {
			return
		}
		w := newCapWriter(limit, false)
		for p := data; len(p) > 0; {
			n := min(chunk, len(p))
			w.Write(p[:n])
			p = p[n:]
		}
		got, trunc, _ := w.Text(nil)
		if !utf8.ValidString(got) {
			t.Fatalf("Text() is not valid UTF-8: %q", got)
		}
		if !trunc && len(data) > max(limit, 2) {
			t.Fatalf("%d bytes through a %d limit not truncated", len(data), limit)
		}
		if !trunc && utf8.Valid(data) && got != string(data) {
			t.Fatalf("Text() = %q; want the input %q", got, data)
		}
		if trunc && len(got) > 3*max(limit, 2)+200 {
			t.Fatalf("kept %d bytes for a %d limit", len(got), limit)
		}
	})
}

// secretRedactor replaces the word SECRET followed by digits, as a stand-in
// for the real redactor.
func secretRedactor(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "SECRET")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := i + len("SECRET")
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		b.WriteString(s[:i])
		b.WriteString("[REDACTED:test]")
		s = s[j:]
	}
}

// TestCapWriterRedactsAcrossTheCut puts a secret across each cut point:
// it is replaced whole and no part of it is shown.
func TestCapWriterRedactsAcrossTheCut(t *testing.T) {
	secret := "SECRET0123456789012345"
	tests := []struct {
		name  string
		input string
	}{
		{"across the head cut", strings.Repeat("a", 95) + secret + strings.Repeat("b", 500)},
		{"across the tail cut", strings.Repeat("a", 500) + secret + strings.Repeat("b", 92)},
		{"all kept, across the cut", strings.Repeat("a", 95) + secret + strings.Repeat("b", 120)},
		{"far beyond the margin", strings.Repeat("a", 95) + secret + strings.Repeat("c", 3*redactMargin) + secret + strings.Repeat("b", 92)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newCapWriter(200, true)
			io.Copy(w, iotest.OneByteReader(strings.NewReader(tt.input)))
			got, trunc, _ := w.Text(func(s string) (string, error) { return secretRedactor(s), nil })
			if !trunc {
				t.Fatalf("not truncated: %q", got)
			}
			for i := 0; i+6 <= len(secret); i++ {
				if part := secret[i : i+6]; strings.Contains(got, part) && part != "SECRET" {
					t.Errorf("part %q of the secret is shown: %q", part, got)
				}
			}
			if strings.Contains(got, "SECRET") {
				t.Errorf("the secret's start is shown: %q", got)
			}
			if strings.Count(got, "[REDACTED:") != strings.Count(got, "[REDACTED:test]") {
				t.Errorf("a marker was cut: %q", got)
			}
		})
	}
}
