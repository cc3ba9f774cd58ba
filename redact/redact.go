// Package redact finds secrets in text and replaces each with
// [REDACTED:<kind>].
//
// Two kinds of detection work together: known values (the server's own
// secret-looking environment variables and values the operator names),
// matched with their common encodings, and token shapes (vendor keys, JWTs,
// private keys, credentials in URLs and bearer headers).
//
// A [Redactor] is built once and is safe for concurrent use. Redacting is
// idempotent: the replacement text matches no rule.
//
// The package imports no other package of pybox.
package redact

import (
	"encoding/base64"
	"regexp"
	"sort"
	"strings"
)

// KnownKind is the kind reported for a known value.
const KnownKind = "known_secret"

// MinValueLen is the shortest known value that is redacted: shorter ones
// would match ordinary text.
const MinValueLen = 8

// secretNameParts are the parts of an environment variable's name that
// mark its value as a secret.
var secretNameParts = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PRIVATE"}

// Options configures a [Redactor]. The zero value detects token shapes only.
type Options struct {
	// Values are secrets to redact wherever they appear.
	Values []string
	// Environ is an environment as os.Environ returns it; the values of its
	// secret-looking variables are added to Values.
	Environ []string
}

// Redactor replaces secrets in text.
type Redactor struct {
	known *strings.Replacer
	rules []rule
}

type rule struct {
	kind string
	re   *regexp.Regexp
	// keep is the number of the group kept before the replacement (0: none).
	keep int
	// suffix is literal text put back after the replacement.
	suffix string
}

// defaultRules are the token shapes found without being told.
var defaultRules = []rule{
	{kind: "private_key", re: regexp.MustCompile(`-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY( BLOCK)?-----[\s\S]*?-----END[A-Z0-9 ]{0,40} PRIVATE KEY( BLOCK)?-----`)},
	{kind: "anthropic_api_key", re: regexp.MustCompile(`\bsk-ant-[A-Za-z0-9_-]{16,}`)},
	{kind: "openai_api_key", re: regexp.MustCompile(`\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}`)},
	{kind: "aws_access_key_id", re: regexp.MustCompile(`\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b`)},
	{kind: "aws_secret_access_key", re: regexp.MustCompile(`(?i)((?:aws_?secret_?access_?key|aws_?secret_?key|secret_?access_?key)["']?\s*[:=]\s*["']?)[A-Za-z0-9/+=]{40}\b`), keep: 1},
	{kind: "github_token", re: regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})`)},
	{kind: "gitlab_token", re: regexp.MustCompile(`\bglpat-[A-Za-z0-9_-]{20,}`)},
	{kind: "slack_token", re: regexp.MustCompile(`\bxox[abposre]-[A-Za-z0-9-]{10,}`)},
	{kind: "google_api_key", re: regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}`)},
	{kind: "stripe_key", re: regexp.MustCompile(`\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}`)},
	{kind: "jwt", re: regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`)},
	{kind: "bearer_token", re: regexp.MustCompile(`(?i)(\bbearer\s+)[A-Za-z0-9._~+/-]{16,}=*`), keep: 1},
	{kind: "url_credentials", re: regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]{1,20}://[^/\s:@"'<>]{1,256}:)[^@\s/"'<>]{1,256}@`), keep: 1, suffix: "@"},
}

// New builds a Redactor. Build one and share it: building is the costly part.
func New(opt Options) *Redactor {
	values := append([]string(nil), opt.Values...)
	values = append(values, SecretEnvValues(opt.Environ)...)
	r := &Redactor{rules: defaultRules}
	var pairs []string
	seen := map[string]bool{}
	for _, v := range values {
		for _, form := range encodings(v) {
			if len(form) < MinValueLen || seen[form] {
				continue
			}
			seen[form] = true
			pairs = append(pairs, form)
		}
	}
	// Longer forms first, so a value inside another is not matched first.
	sort.Slice(pairs, func(i, j int) bool { return len(pairs[i]) > len(pairs[j]) })
	if len(pairs) > 0 {
		args := make([]string, 0, 2*len(pairs))
		for _, p := range pairs {
			args = append(args, p, "[REDACTED:"+KnownKind+"]")
		}
		r.known = strings.NewReplacer(args...)
	}
	return r
}

// encodings returns v and the forms it takes when printed encoded.
func encodings(v string) []string {
	if len(v) < MinValueLen {
		return nil
	}
	return []string{
		v,
		base64.StdEncoding.EncodeToString([]byte(v)),
		base64.RawStdEncoding.EncodeToString([]byte(v)),
		base64.RawURLEncoding.EncodeToString([]byte(v)),
	}
}

// SecretEnvValues returns the values of the secret-looking variables of an
// environment: names holding KEY, TOKEN, SECRET, PASSWORD, PASSWD,
// CREDENTIAL, AUTH or PRIVATE, with values of at least [MinValueLen] bytes.
func SecretEnvValues(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || len(value) < MinValueLen {
			continue
		}
		upper := strings.ToUpper(name)
		for _, part := range secretNameParts {
			if strings.Contains(upper, part) {
				out = append(out, value)
				break
			}
		}
	}
	return out
}

// String returns s with every secret found replaced by [REDACTED:<kind>].
func (r *Redactor) String(s string) string {
	if r == nil || s == "" {
		return s
	}
	if r.known != nil {
		s = r.known.Replace(s)
	}
	for _, ru := range r.rules {
		if !ru.re.MatchString(s) {
			continue
		}
		repl := "[REDACTED:" + ru.kind + "]"
		if ru.keep > 0 {
			s = ru.re.ReplaceAllString(s, "${"+itoa(ru.keep)+"}"+strings.ReplaceAll(repl+ru.suffix, "$", "$$"))
		} else {
			s = ru.re.ReplaceAllLiteralString(s, repl)
		}
	}
	return s
}

func itoa(i int) string { return string(rune('0' + i)) }
