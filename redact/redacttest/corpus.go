// Package redacttest generates seeded corpora of secrets and of benign
// output, for the tests that measure the redactor's recall and precision.
package redacttest

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/url"
	"strings"
)

// Sample is one secret as a program might print it.
type Sample struct {
	// Kind names the generator.
	Kind string
	// Secret is the sensitive text: none of it may survive.
	Secret string
	// Text is the line printed, holding Secret.
	Text string
}

// Placement puts a secret in a line, as programs print them.
var Placements = []func(s string) string{
	func(s string) string { return s },                                        // alone on its line
	func(s string) string { return "value is " + s + " (rotated yesterday)" }, // middle of a line
	func(s string) string { return "token: " + s },                            // line end
	func(s string) string { return fmt.Sprintf("{'k': '%s', 'n': 3}", s) },    // a dict's repr
	func(s string) string { return "x=" + s + ";y=2" },
	func(s string) string { return "(" + s + ")." },
	func(s string) string { return "\t" + s + "\t|" },
	func(s string) string { return `"` + s + `",` },
}

const (
	alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	lower = "abcdefghijklmnopqrstuvwxyz"
	hexd  = "0123456789abcdef"
	b32   = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	b64   = alnum + "+/"
	urlb  = alnum + "-_"
)

type gen struct{ r *rand.Rand }

func (g gen) from(set string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = set[g.r.Intn(len(set))]
	}
	return string(b)
}

func (g gen) digits(n int) string { return g.from("0123456789", n) }

// pem makes a private key block of n base64 lines.
func (g gen) pem(label string, lines int) (secret, text string) {
	var body []string
	for range lines {
		body = append(body, g.from(b64, 64))
	}
	secret = strings.Join(body, "\n")
	return secret, "-----BEGIN " + label + "-----\n" + secret + "\n-----END " + label + "-----"
}

// generator makes one secret and the text that carries it; when text is
// "", the secret is printed as it is.
type generator struct {
	kind string
	make func(g gen, known string, i int) (secret, text string)
}

var generators = []generator{
	{"github-pat", func(g gen, _ string, _ int) (string, string) { return "ghp_" + g.from(alnum, 36), "" }},
	{"github-fine-grained-pat", func(g gen, _ string, _ int) (string, string) { return "github_pat_" + g.from(alnum+"_", 82), "" }},
	{"gitlab-pat", func(g gen, _ string, _ int) (string, string) { return "glpat-" + g.from(urlb, 20), "" }},
	{"slack-bot-token", func(g gen, _ string, _ int) (string, string) {
		return "xoxb-" + g.digits(12) + "-" + g.digits(13) + "-" + g.from(alnum, 24), ""
	}},
	{"stripe-live-key", func(g gen, _ string, _ int) (string, string) { return "sk_live_" + g.from(alnum, 24), "" }},
	{"aws-access-key-id", func(g gen, _ string, _ int) (string, string) { return "AKIA" + g.from(b32, 16), "" }},
	{"aws-secret-access-key", func(g gen, _ string, i int) (string, string) {
		s := g.from(alnum+"+/", 40)
		names := []string{"aws_secret_access_key = ", "AWS_SECRET_ACCESS_KEY=", `"SecretAccessKey": "`, "aws_secret_key: "}
		return s, names[i%len(names)] + s
	}},
	{"gcp-api-key", func(g gen, _ string, _ int) (string, string) { return "AIza" + g.from(urlb, 35), "" }},
	{"openai-api-key", func(g gen, _ string, i int) (string, string) {
		if i%2 == 0 {
			return "sk-proj-" + g.from(urlb, 74) + "T3BlbkFJ" + g.from(urlb, 74), ""
		}
		return "sk-" + g.from(alnum, 48), ""
	}},
	{"anthropic-api-key", func(g gen, _ string, _ int) (string, string) { return "sk-ant-api03-" + g.from(urlb, 93) + "AA", "" }},
	{"anthropic-key-other-length", func(g gen, _ string, i int) (string, string) {
		s := "sk-ant-" + []string{"api03-", "admin01-", "oat01-", ""}[i%4] + g.from(urlb, 30+7*i)
		return s, "ANTHROPIC_API_KEY=" + s
	}},
	{"npm-access-token", func(g gen, _ string, _ int) (string, string) { return "npm_" + g.from(alnum, 36), "" }},
	{"pypi-upload-token", func(g gen, _ string, _ int) (string, string) { return "pypi-AgEIcHlwaS5vcmc" + g.from(urlb, 70), "" }},
	{"twilio-api-key", func(g gen, _ string, _ int) (string, string) { return "SK" + g.from(hexd, 32), "" }},
	{"sendgrid-api-token", func(g gen, _ string, _ int) (string, string) {
		return "SG." + g.from(urlb, 22) + "." + g.from(urlb, 43), ""
	}},
	{"shopify-access-token", func(g gen, _ string, _ int) (string, string) { return "shpat_" + g.from(hexd, 32), "" }},
	{"digitalocean-pat", func(g gen, _ string, _ int) (string, string) { return "dop_v1_" + g.from(hexd, 64), "" }},
	{"huggingface-access-token", func(g gen, _ string, _ int) (string, string) {
		return "hf_" + g.from(lower+"ABCDEFGHIJKLMNOPQRSTUVWXYZ", 34), ""
	}},
	{"databricks-api-token", func(g gen, _ string, _ int) (string, string) { return "dapi" + g.from(hexd, 32), "" }},
	{"linear-api-key", func(g gen, _ string, _ int) (string, string) { return "lin_api_" + g.from(alnum, 40), "" }},
	{"postman-api-token", func(g gen, _ string, _ int) (string, string) {
		return "PMAK-" + g.from(hexd, 24) + "-" + g.from(hexd, 34), ""
	}},
	{"pulumi-api-token", func(g gen, _ string, _ int) (string, string) { return "pul-" + g.from(hexd, 40), "" }},
	{"doppler-api-token", func(g gen, _ string, _ int) (string, string) { return "dp.pt." + g.from(alnum, 43), "" }},
	{"sentry-user-token", func(g gen, _ string, _ int) (string, string) { return "sntryu_" + g.from(hexd, 64), "" }},
	{"jwt", func(g gen, _ string, _ int) (string, string) {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
		p := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"sub":"%s","iat":%s}`, g.from(alnum, 12), g.digits(10))))
		return h + "." + p + "." + g.from(urlb, 43), ""
	}},
	{"rsa-private-key", func(g gen, _ string, i int) (string, string) { return g.pem("RSA PRIVATE KEY", 8+i) }},
	{"ec-openssh-private-key", func(g gen, _ string, i int) (string, string) {
		return g.pem([]string{"EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "PRIVATE KEY", "ENCRYPTED PRIVATE KEY"}[i%4], 4+i)
	}},
	{"url-credentials", func(g gen, _ string, i int) (string, string) {
		pw := g.from(alnum, 10) + []string{"!", "#", "%25", "~", "$", "-", "_", "."}[i%8] + g.from(alnum, 6)
		scheme := []string{"postgres", "mysql", "https", "redis", "amqp", "mongodb+srv", "ftp", "http"}[i%8]
		return pw, fmt.Sprintf("%s://user%d:%s@db%d.internal:5432/app", scheme, i, pw, i)
	}},
	{"bearer-header", func(g gen, _ string, i int) (string, string) {
		t := g.from(alnum+"._-", 40)
		return t, []string{"Authorization: Bearer ", "authorization: bearer ", "'Authorization': 'Bearer ", "headers={'Authorization': 'Bearer "}[i%4] + t
	}},
	{"known-raw", func(_ gen, known string, _ int) (string, string) { return known, "" }},
	{"known-base64", func(_ gen, known string, i int) (string, string) {
		// Inside a longer base64 text, at each byte alignment.
		prefix := strings.Repeat("\x00", i%3)
		enc := base64.StdEncoding.EncodeToString([]byte(prefix + known + "tail"))
		return enc, ""
	}},
	{"known-base64url", func(_ gen, known string, _ int) (string, string) {
		return base64.RawURLEncoding.EncodeToString([]byte(known)), ""
	}},
	{"known-hex", func(_ gen, known string, i int) (string, string) {
		h := hex.EncodeToString([]byte(known))
		if i%2 == 1 {
			h = strings.ToUpper(h)
		}
		return h, ""
	}},
	{"known-url-escaped", func(_ gen, known string, _ int) (string, string) { return url.QueryEscape(known), "" }},
	{"known-json-escaped", func(_ gen, known string, _ int) (string, string) {
		b, _ := json.Marshal(map[string]string{"password": known})
		j, _ := json.Marshal(known)
		return string(j[1 : len(j)-1]), string(b)
	}},
}

// Known returns n secret values of the kind an operator names, with the
// characters that URL and JSON escaping change.
func Known(seed int64, n int) []string {
	g := gen{rand.New(rand.NewSource(seed))}
	out := make([]string, n)
	for i := range out {
		out[i] = g.from(alnum, 8) + []string{"/", "+", "\"", "&", "=", "\\", " ", "%"}[i%8] + g.from(alnum, 8) + "é"
	}
	return out
}

// Corpus returns perKind samples of every kind, with placements varied;
// known values are drawn from known in turn.
func Corpus(seed int64, perKind int, known []string) []Sample {
	g := gen{rand.New(rand.NewSource(seed))}
	var out []Sample
	for _, gn := range generators {
		for i := range perKind {
			secret, text := gn.make(g, known[i%len(known)], i)
			if text == "" {
				text = secret
			}
			out = append(out, Sample{Kind: gn.kind, Secret: secret, Text: Placements[(i+len(out))%len(Placements)](text)})
		}
	}
	return out
}

// Kinds returns the names of the corpus's kinds.
func Kinds() []string {
	var k []string
	for _, g := range generators {
		k = append(k, g.kind)
	}
	return k
}

// Fragments returns the substrings of secret of length n, stepping by n/2,
// so a test can check that no part of a secret survives.
func Fragments(secret string, n int) []string {
	if len(secret) <= n {
		return []string{secret}
	}
	var out []string
	for i := 0; i+n <= len(secret); i += max(1, n/2) {
		out = append(out, secret[i:i+n])
	}
	return out
}

// Benign returns output that holds no secret: identifiers, hashes, short
// base64, URLs without credentials, prose, numbers and tracebacks.
func Benign(seed int64) []string {
	g := gen{rand.New(rand.NewSource(seed))}
	var out []string
	for i := range 40 {
		u := g.from(hexd, 32)
		out = append(out, fmt.Sprintf("id %d: %s-%s-4%s-a%s-%s", i, u[:8], u[8:12], u[13:16], u[17:20], u[20:]))
	}
	for range 40 {
		out = append(out, "commit "+g.from(hexd, 40)+"\nAuthor: Ada <ada@example.com>\n\n    Fix the off-by-one in the parser")
	}
	for range 40 {
		out = append(out, fmt.Sprintf("sha256(%s.csv) = %s", g.from(lower, 6), g.from(hexd, 64)))
	}
	for i := range 40 {
		b := make([]byte, 4+i%12)
		g.r.Read(b)
		out = append(out, "nonce="+base64.StdEncoding.EncodeToString(b))
	}
	for i := range 40 {
		out = append(out, fmt.Sprintf("https://example.org/%s/%d?page=%d&sort=asc#section-%d", g.from(lower, 7), i, i%9+1, i))
	}
	prose := []string{
		"The mean of the sample is 3.663 and the standard deviation is 1.21.",
		"Please pass the API key in the configuration file, not on the command line.",
		"The token count for this prompt is 1,204; the secret to good results is iteration.",
		"Password rules: at least 12 characters, one digit, one symbol.",
		"Authentication succeeded for user alice after 3 attempts.",
		"Bearer bonds were common in the 19th century.",
		"key findings: revenue grew 12% while costs fell 3%",
		"The private key never leaves the hardware module.",
		"Access granted to /mnt/user-data/sales.csv (12 kB).",
		"credentials are read from the environment at start-up",
	}
	for i := range 40 {
		out = append(out, prose[i%len(prose)])
	}
	for i := range 30 {
		out = append(out, fmt.Sprintf("Traceback (most recent call last):\n  File \"main.py\", line %d, in <module>\n    result = compute(data[%d])\n  File \"main.py\", line 4, in compute\n    return 1 / x\nZeroDivisionError: division by zero", 10+i, i))
	}
	for i := range 40 {
		var row []string
		for j := range 6 {
			row = append(row, fmt.Sprintf("%.6f", g.r.NormFloat64()*float64(j+1)))
		}
		out = append(out, fmt.Sprintf("%3d  ", i)+strings.Join(row, "  "))
	}
	for i := range 20 {
		out = append(out, fmt.Sprintf("token_count=%d key_length=%d api_version=2024-%02d-01 secret_name=prod-db", 100+i, 16+i, i%12+1))
	}
	return out
}

// Leaked reports whether any 12-byte part of secret is in out.
func Leaked(out, secret string) bool {
	for _, f := range Fragments(secret, 12) {
		if strings.Contains(out, f) {
			return true
		}
	}
	return false
}
