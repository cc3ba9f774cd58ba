package redact

import (
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRedact(t *testing.T) {
	known := "hunter2-correct-horse"
	r := New(Options{Values: []string{known}, Environ: []string{"MY_API_KEY=env-secret-value-123", "PATH=/usr/bin", "SHORT_TOKEN=abc"}})
	tests := []struct {
		name, in, want string
	}{
		{"known value", "pw: " + known + "!", "pw: [REDACTED:known_secret]!"},
		{"known value base64", base64.StdEncoding.EncodeToString([]byte(known)), "[REDACTED:known_secret]"},
		{"env value", "x env-secret-value-123 y", "x [REDACTED:known_secret] y"},
		{"short env value kept", "abc", "abc"},
		{"anthropic", "ANTHROPIC_API_KEY=sk-ant-api03-" + strings.Repeat("x", 90), "ANTHROPIC_API_KEY=[REDACTED:anthropic_api_key]"},
		{"aws key id", "AKIAIOSFODNN7EXAMPLE", "[REDACTED:aws_access_key_id]"},
		{"aws secret", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = [REDACTED:aws_secret_access_key]"},
		{"github", "token ghp_" + strings.Repeat("a", 36), "token [REDACTED:github_token]"},
		{"url credentials", "postgres://admin:s3cr3tpass@db:5432/x", "postgres://admin:[REDACTED:url_credentials]@db:5432/x"},
		{"bearer", "Authorization: Bearer abcdef0123456789abcdef", "Authorization: Bearer [REDACTED:bearer_token]"},
		{"jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "[REDACTED:jwt]"},
		{"private key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "[REDACTED:private_key]"},
		{"plain text kept", "mean 3.663, uuid 123e4567-e89b-12d3-a456-426614174000 https://example.com/a", "mean 3.663, uuid 123e4567-e89b-12d3-a456-426614174000 https://example.com/a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.String(tt.in); got != tt.want {
				t.Errorf("String(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzRedact(f *testing.F) {
	secret := "sk-ant-api03-" + strings.Repeat("Q", 40)
	r := New(Options{Values: []string{"known-value-42"}})
	f.Add("hello", "world")
	f.Add("a\xff", "known-value-42")
	f.Fuzz(func(t *testing.T, before, after string) {
		in := before + " " + secret + " " + after + " known-value-42 "
		got := r.String(in)
		if strings.Contains(got, secret) || strings.Contains(got, "known-value-42") {
			t.Fatalf("a planted secret survived: %q", got)
		}
		if utf8.ValidString(in) && !utf8.ValidString(got) {
			t.Fatalf("redacting broke UTF-8: %q", got)
		}
		if again := r.String(got); again != got {
			t.Fatalf("redacting twice changed the text: %q -> %q", got, again)
		}
	})
}
