// Package redact finds secrets in text and replaces each with
// [REDACTED:<kind>].
//
// # Detection
//
// Three detectors run in turn over the text:
//
//   - Known values: the values of the server's own secret-looking
//     environment variables and values the operator names, matched raw and
//     in their common encodings (base64 in both alphabets at every byte
//     alignment, hex, URL and JSON escaping). Kind "known_secret".
//   - pybox's rules: shapes that gitleaks' default rules were measured to
//     miss (credentials in URLs, bearer headers, Anthropic and OpenAI keys
//     of any length, AWS secret keys after their usual names), and the
//     operator's own patterns.
//   - gitleaks' default rules (github.com/zricethezav/gitleaks/v8, 222 rules
//     maintained by the gitleaks project), with decoding of base64, hex and
//     percent-encoded text up to [Options.DecodeDepth] passes. Kinds are
//     gitleaks' rule ids, such as "github-pat" or "private-key".
//
// # Guarantees
//
// A [Redactor] is built once and is safe for concurrent use. Redacting is
// idempotent: a replacement matches no rule. Output stays valid UTF-8 when
// the input is. gitleaks' own logging, which prints raw secrets, is
// silenced.
//
// # Cost
//
// Redacting is linear in the text's size: every rule runs only on windows
// around its keywords (or around runs of encoded-looking text, for
// gitleaks' decoding), windows are merged up to [maxWindow] bytes, and the
// secrets found are replaced everywhere in one pass per distinct length.
// The constant depends on the text: text full of credential-like
// assignments is the slowest case (gitleaks' generic-api-key rule).
// [Redactor.StringContext] stops at its context's end and says so, so a
// caller with a deadline can withhold what it could not redact.
//
// The package imports no other package of pybox.
package redact

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"

	ahocorasick "github.com/BobuSumisu/aho-corasick"
	"github.com/rs/zerolog"
	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/logging"
)

// KnownKind is the kind reported for a known value.
const KnownKind = "known_secret"

// MinValueLen is the shortest known value that is redacted: shorter ones
// would match ordinary text.
const MinValueLen = 8

// DefaultDecodeDepth is how many decoding passes gitleaks makes by default.
// It is what the gitleaks command line uses; the package benchmarks show
// its cost.
const DefaultDecodeDepth = 5

// secretNameParts are the parts of an environment variable's name that
// mark its value as a secret.
var secretNameParts = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PRIVATE"}

// Pattern is an operator's own rule: text matching Regex is replaced by
// [REDACTED:Kind]. When Regex has a group named "secret", only that group
// is replaced.
type Pattern struct {
	Kind  string `json:"kind"`
	Regex string `json:"regex"`
}

// Options configures a [Redactor]. The zero value runs every rule with the
// default decoding depth and knows no values.
type Options struct {
	// Values are secrets to redact wherever they appear, in any encoding.
	Values []string
	// Environ is an environment as os.Environ returns it; the values of its
	// secret-looking variables are added to Values.
	Environ []string
	// Patterns are the operator's own rules.
	Patterns []Pattern
	// Disable names rules to turn off: pybox's kinds (such as
	// "url_credentials") or gitleaks rule ids (such as "generic-api-key").
	// "gitleaks" turns off all of gitleaks' rules.
	Disable []string
	// DecodeDepth is gitleaks' number of decoding passes; 0 means
	// [DefaultDecodeDepth], a negative value none.
	DecodeDepth int
}

// File is the JSON form of a redaction file (--redact-file).
type File struct {
	Values   []string  `json:"values"`
	Patterns []Pattern `json:"patterns"`
	Disable  []string  `json:"disable"`
}

// LoadFile reads a redaction file and adds it to opt.
func LoadFile(path string, opt *Options) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var f File
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("%s: %w (want {\"values\": [...], \"patterns\": [{\"kind\": ..., \"regex\": ...}], \"disable\": [...]})", path, err)
	}
	opt.Values = append(opt.Values, f.Values...)
	opt.Patterns = append(opt.Patterns, f.Patterns...)
	opt.Disable = append(opt.Disable, f.Disable...)
	return nil
}

// Redactor replaces secrets in text.
type Redactor struct {
	known      *strings.Replacer
	knownForms []string
	rules      []rule
	// keywords finds, in one pass, the keywords of pybox's rules
	// (keywordRules maps each pattern to its rules) and of gitleaks' rules
	// (marked in gitleaksKeyword).
	keywords        *ahocorasick.Trie
	keywordRules    map[int64][]int
	gitleaksKeyword map[int64]bool
	det             *detect.Detector
}

type rule struct {
	kind string
	re   *regexp.Regexp
	// group is the index of the group replaced; 0 means the whole match.
	group int
	// keywords, in lower case, of which every match holds one; the regex
	// runs only near them. None means it runs over the whole text.
	keywords []string
	// reach is how far a match may extend past its keyword, back how far
	// it may start before it.
	reach, back int
	// anchored rules match from their keyword on, after a URL scheme.
	anchored bool
}

// builtinRules are pybox's own shapes, for what gitleaks' defaults miss.
var builtinRules = []rule{
	{kind: "private_key", re: regexp.MustCompile(`-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY( BLOCK)?-----[\s\S]*?-----END[A-Z0-9 ]{0,40} PRIVATE KEY( BLOCK)?-----`), keywords: []string{"-----begin"}, reach: 64 << 10},
	{kind: "anthropic_api_key", re: regexp.MustCompile(`sk-ant-[A-Za-z0-9_-]{16,}`), keywords: []string{"sk-ant-"}},
	{kind: "openai_api_key", re: regexp.MustCompile(`\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}`), keywords: []string{"sk-"}},
	{kind: "aws_access_key_id", re: regexp.MustCompile(`\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{16}`), keywords: []string{"akia", "asia", "abia", "acca", "a3t"}},
	{kind: "aws_secret_access_key", re: regexp.MustCompile(`(?i)(?:aws_?secret_?access_?key|aws_?secret_?key|secret_?access_?key|aws_?secret)["']?\s*[:=]\s*["']?([A-Za-z0-9/+=]{40})(?:[^A-Za-z0-9/+=]|$)`), group: 1, keywords: []string{"secret"}, back: 32, reach: 96},
	{kind: "github_token", re: regexp.MustCompile(`(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})`), keywords: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"}},
	{kind: "gitlab_token", re: regexp.MustCompile(`glpat-[A-Za-z0-9_-]{20,}`), keywords: []string{"glpat-"}},
	{kind: "slack_token", re: regexp.MustCompile(`xox[abposre]-[A-Za-z0-9-]{10,}`), keywords: []string{"xox"}},
	{kind: "google_api_key", re: regexp.MustCompile(`AIza[0-9A-Za-z_-]{35}`), keywords: []string{"aiza"}},
	{kind: "stripe_key", re: regexp.MustCompile(`(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}`), keywords: []string{"_live_", "_test_"}},
	{kind: "jwt", re: regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`), keywords: []string{"eyj"}},
	{kind: "bearer_token", re: regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)`), group: 1, keywords: []string{"bearer"}},
	// Anchored at its keyword: a scheme, checked by hand, comes before it.
	{kind: "url_credentials", re: regexp.MustCompile(`\A://[^/\s:@"'<>]{1,256}:([^@\s/"'<>]{1,256})@`), group: 1, keywords: []string{"://"}, anchored: true},
	// Vendor tokens that gitleaks' rules find only before a space, quote or
	// semicolon; here they are found before any character.
	{kind: "api_token", re: regexp.MustCompile(`(?:npm_[A-Za-z0-9]{36}|SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}|dop_v1_[a-f0-9]{64}|hf_[A-Za-z]{34}|dapi[a-f0-9]{32}|PMAK-[a-f0-9]{24}-[a-f0-9]{34}|pul-[a-f0-9]{40}|glc_[A-Za-z0-9+/]{32,400}={0,3}|HRKU-AA[0-9A-Za-z_-]{58}|sntryu_[a-f0-9]{64}|pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,1000}|shpat_[a-fA-F0-9]{32}|lin_api_[A-Za-z0-9]{40}|dp\.pt\.[A-Za-z0-9]{43})`),
		keywords: []string{"npm_", "sg.", "dop_v1_", "hf_", "dapi", "pmak-", "pul-", "glc_", "hrku-", "sntryu_", "pypi-", "shpat_", "lin_api_", "dp.pt."}, reach: 1100},
}

var (
	baseOnce sync.Once
	baseCfg  config.Config
	baseErr  error
)

// gitleaksConfig loads gitleaks' default configuration once: its loader
// keeps global state.
func gitleaksConfig() (config.Config, error) {
	baseOnce.Do(func() {
		// gitleaks logs raw secrets at debug level and chats at info.
		logging.Logger = zerolog.Nop()
		d, err := detect.NewDetectorDefaultConfig()
		if err != nil {
			baseErr = fmt.Errorf("loading gitleaks' default rules: %w", err)
			return
		}
		baseCfg = d.Config
	})
	return baseCfg, baseErr
}

// New builds a Redactor. Build one and share it: building is the costly part.
func New(opt Options) (*Redactor, error) {
	disabled := map[string]bool{}
	for _, d := range opt.Disable {
		disabled[strings.TrimSpace(d)] = true
	}
	r := &Redactor{}
	for _, ru := range builtinRules {
		if !disabled[ru.kind] {
			r.rules = append(r.rules, ru)
		}
	}
	for _, p := range opt.Patterns {
		if p.Kind == "" || !validKind(p.Kind) {
			return nil, fmt.Errorf("pattern kind %q: use letters, digits, '-' and '_'", p.Kind)
		}
		re, err := regexp.Compile(p.Regex)
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", p.Kind, err)
		}
		if re.MatchString("") {
			return nil, fmt.Errorf("pattern %q matches empty text", p.Kind)
		}
		g := re.SubexpIndex("secret")
		r.rules = append(r.rules, rule{kind: p.Kind, re: re, group: max(g, 0)})
	}

	var kws []string
	r.keywordRules = map[int64][]int{}
	index := map[string]int64{}
	for ri, ru := range r.rules {
		for _, k := range ru.keywords {
			id, ok := index[k]
			if !ok {
				id = int64(len(kws))
				index[k] = id
				kws = append(kws, k)
			}
			r.keywordRules[id] = append(r.keywordRules[id], ri)
		}
	}
	r.gitleaksKeyword = map[int64]bool{}

	if !disabled["gitleaks"] {
		base, err := gitleaksConfig()
		if err != nil {
			return nil, err
		}
		cfg := base
		cfg.Rules = make(map[string]config.Rule, len(base.Rules))
		for id, ru := range base.Rules {
			if !disabled[id] {
				cfg.Rules[id] = fastRule(ru)
			}
		}
		r.det = detect.NewDetector(cfg)
		for k := range cfg.Keywords {
			k = strings.ToLower(k)
			id, ok := index[k]
			if !ok {
				id = int64(len(kws))
				index[k] = id
				kws = append(kws, k)
			}
			r.gitleaksKeyword[id] = true
		}
		switch {
		case opt.DecodeDepth == 0:
			r.det.MaxDecodeDepth = DefaultDecodeDepth
		case opt.DecodeDepth > 0:
			r.det.MaxDecodeDepth = opt.DecodeDepth
		}
	}

	r.keywords = ahocorasick.NewTrieBuilder().AddStrings(kws).Build()

	values := append([]string(nil), opt.Values...)
	values = append(values, SecretEnvValues(opt.Environ)...)
	var forms []string
	seen := map[string]bool{}
	for _, v := range values {
		for _, f := range Encodings(v) {
			if len(f) >= MinValueLen && !seen[f] {
				seen[f] = true
				forms = append(forms, f)
			}
		}
	}
	// Longer forms first, so a value inside another is not matched first.
	sort.Slice(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	if len(forms) > 0 {
		args := make([]string, 0, 2*len(forms))
		for _, f := range forms {
			args = append(args, f, "[REDACTED:"+KnownKind+"]")
		}
		r.known = strings.NewReplacer(args...)
		r.knownForms = forms
	}
	return r, nil
}

// lazyPrefix opens 96 of gitleaks' rules: up to 50 word bytes before the
// keyword, lazily. It only moves a match's start back, never changes which
// secret is found, and makes Go's regexp machine keep up to 50 threads alive
// on every word: dropped, the rules run several times faster.
const lazyPrefix = `(?i)[\w.-]{0,50}?`

func fastRule(ru config.Rule) config.Rule {
	if ru.Regex != nil && strings.HasPrefix(ru.Regex.String(), lazyPrefix) {
		if re, err := regexp.Compile("(?i)" + strings.TrimPrefix(ru.Regex.String(), lazyPrefix)); err == nil {
			ru.Regex = re
		}
	}
	return ru
}

// MustNew is [New] for options known to be valid; it panics otherwise.
func MustNew(opt Options) *Redactor {
	r, err := New(opt)
	if err != nil {
		panic(err)
	}
	return r
}

func validKind(k string) bool {
	for _, c := range k {
		if !(c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Encodings returns v and the forms it takes when printed encoded: base64
// in the standard and URL alphabets at each of the three byte alignments
// (the part of the encoding that depends on v alone, so v is found inside a
// longer encoded text too), hex in both cases, URL escaping and JSON
// escaping.
func Encodings(v string) []string {
	if len(v) < MinValueLen {
		return nil
	}
	out := []string{v}
	b := []byte(v)
	for k := 0; k < 3; k++ {
		enc := base64.StdEncoding.EncodeToString(append(make([]byte, k), b...))
		// Groups of 4 characters encode 3 bytes; the groups made only of
		// v's bytes run from the first whole group after the k prefix bytes
		// to the last group that holds no padding.
		first := (k + 2) / 3 * 4
		last := (k + len(b)) / 3 * 4
		if last-first >= MinValueLen {
			mid := enc[first:last]
			out = append(out, mid, strings.NewReplacer("+", "-", "/", "_").Replace(mid))
		}
		if k == 0 {
			out = append(out, enc, base64.URLEncoding.EncodeToString(b))
		}
	}
	out = append(out, hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
		url.QueryEscape(v), url.PathEscape(v))
	if j, err := json.Marshal(v); err == nil {
		out = append(out, string(j[1:len(j)-1]))
	}
	return out
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
	out, _ := r.redact(context.Background(), s, false)
	return out
}

// StringContext is [Redactor.String] that stops when ctx ends: it returns
// ctx's error, and then the text must not be used.
func (r *Redactor) StringContext(ctx context.Context, s string) (string, error) {
	return r.redact(ctx, s, false)
}

// MaskContext replaces every secret found with as many '*' bytes as it
// has, for data whose layout must stay (binary files): the length does not
// change. It stops when ctx ends, as StringContext does.
func (r *Redactor) MaskContext(ctx context.Context, s string) (string, error) {
	return r.redact(ctx, s, true)
}

func (r *Redactor) redact(ctx context.Context, s string, mask bool) (string, error) {
	if r == nil || s == "" {
		return s, nil
	}
	if r.known != nil {
		if mask {
			s = replaceSpans(s, allKnown(s, r.knownForms), true)
		} else {
			s = r.known.Replace(s)
		}
	}
	// One pass finds every keyword of pybox's rules; each rule's regex then
	// runs only near its own keywords.
	lower := asciiLower(s)
	hits := make([][]int, len(r.rules))
	var leaks []int // gitleaks' keyword positions and lengths
	for _, m := range r.keywords.MatchString(lower) {
		p := m.Pattern()
		for _, ri := range r.keywordRules[p] {
			hits[ri] = append(hits[ri], int(m.Pos()), len(m.MatchString()))
		}
		if r.gitleaksKeyword[p] {
			leaks = append(leaks, int(m.Pos()), len(m.MatchString()))
		}
	}
	var spans []span
	for i, ru := range r.rules {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		spans = append(spans, ru.find(s, hits[i])...)
	}
	if r.det != nil {
		found, err := r.gitleaks(ctx, s, leaks)
		if err != nil {
			return "", err
		}
		spans = append(spans, found...)
	}
	return replaceSpans(s, spans, mask), nil
}

// defaultReach is how far past its keyword a token may run.
const defaultReach = 512

// find returns the rule's matches in s, given its keywords' positions and
// lengths as pairs.
func (ru rule) find(s string, hits []int) []span {
	var spans []span
	add := func(base int, m []int) {
		if m[2*ru.group] >= 0 {
			spans = append(spans, span{start: base + m[2*ru.group], end: base + m[2*ru.group+1], kind: ru.kind})
		}
	}
	if len(ru.keywords) == 0 {
		for _, m := range ru.re.FindAllStringSubmatchIndex(s, -1) {
			add(0, m)
		}
		return spans
	}
	if ru.anchored {
		for i := 0; i < len(hits); i += 2 {
			at := hits[i]
			if !schemeBefore(s, at) {
				continue
			}
			if m := ru.re.FindStringSubmatchIndex(s[at:min(len(s), at+520)]); m != nil {
				add(at, m)
			}
		}
		return spans
	}
	reach := ru.reach
	if reach == 0 {
		reach = defaultReach
	}
	var ws []window
	for i := 0; i < len(hits); i += 2 {
		ws = append(ws, widen(s, hits[i]-max(ru.back, 2), hits[i]+hits[i+1]+reach))
	}
	for _, w := range mergeWindows(ws, maxWindow) {
		for _, m := range ru.re.FindAllStringSubmatchIndex(s[w.start:w.end], -1) {
			add(w.start, m)
		}
	}
	return spans
}

// maxWindow bounds a merged window: a rule's regex never runs over more of
// the text at once, so its cost stays linear and a deadline is checked
// often. Windows that would grow past it start anew, overlapping the last.
const maxWindow = 64 << 10

// schemeBefore reports whether a URL scheme of 2 to 21 letters, digits,
// '+', '-' or '.' ends at i.
func schemeBefore(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && n < 21; j-- {
		c := s[j]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.' {
			n++
			continue
		}
		break
	}
	return n >= 2
}

// window is a byte range of the text that a regex is run over.
type window struct{ start, end int }

// widen clamps a window to s and extends it to line ends within 4 KiB.
func widen(s string, start, end int) window {
	start, end = max(start, 0), min(end, len(s))
	const limit = 4 << 10
	if i := strings.LastIndexByte(s[max(0, start-limit):start], '\n'); i >= 0 {
		start = max(0, start-limit) + i + 1
	} else {
		start = max(0, start-limit)
	}
	if i := strings.IndexByte(s[end:min(len(s), end+limit)], '\n'); i >= 0 {
		end += i
	} else {
		end = min(len(s), end+limit)
	}
	return window{start, end}
}

// lineAround returns the line that holds s[at:at+n], or, on a line longer
// than 4 KiB, 64 bytes before it to 1 KiB past it, widened to spaces.
func lineAround(s string, at, n int) window {
	const limit = 4 << 10
	start := max(0, at-limit)
	if i := strings.LastIndexByte(s[start:at], '\n'); i >= 0 {
		start += i + 1
	} else if start > 0 {
		start = at - 64
	}
	end := min(len(s), at+n+limit)
	if i := strings.IndexByte(s[at+n:end], '\n'); i >= 0 {
		end = at + n + i
	} else if end < len(s) {
		end = at + n + 1024
		for end < len(s) && s[end] != ' ' && s[end] != '\t' && end < at+n+limit {
			end++
		}
	}
	return window{max(0, start), min(len(s), end)}
}

func mergeWindows(ws []window, limit int) []window {
	if len(ws) < 2 {
		return ws
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].start < ws[j].start })
	out := ws[:1]
	for _, w := range ws[1:] {
		last := &out[len(out)-1]
		if w.start <= last.end && max(last.end, w.end)-last.start <= limit {
			last.end = max(last.end, w.end)
			continue
		}
		out = append(out, w)
	}
	return out
}

// asciiLower lowers ASCII letters only, so byte offsets stay the same.
func asciiLower(s string) string {
	b := []byte(s)
	changed := false
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
			changed = true
		}
	}
	if !changed {
		return s
	}
	return string(b)
}

// span is a byte range of the text to replace.
type span struct {
	start, end int
	kind       string
}

// gitleaks replaces what gitleaks' rules find. Its rules run only near
// their keywords and near runs of encoded-looking text (for its decoding
// passes). A finding's secret is replaced wherever it occurs; a finding in
// decoded text, whose secret does not occur as such, has its encoded span
// replaced.
func (r *Redactor) gitleaks(ctx context.Context, s string, hits []int) ([]span, error) {
	var ws []window
	for i := 0; i < len(hits); i += 2 {
		at, n := hits[i], hits[i+1]
		reach := 512
		switch {
		case strings.EqualFold(s[at:at+n], "-----begin"):
			reach = 64 << 10
		case strings.EqualFold(s[at:at+n], "pypi"):
			reach = 1100
		}
		if reach > 512 {
			ws = append(ws, widen(s, at-64, at+n+reach))
		} else {
			ws = append(ws, lineAround(s, at, n))
		}
	}
	if r.det.MaxDecodeDepth > 0 {
		for _, w := range encodedRuns(s, 16) {
			ws = append(ws, runWindows(s, w)...)
		}
	}
	var spans []span
	secrets := map[string]string{}
	for _, w := range mergeWindows(ws, maxWindow) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		text := s[w.start:w.end]
		var newlines []int
		findings := r.det.DetectContext(ctx, detect.Fragment{Raw: text})
		if err := ctx.Err(); err != nil {
			return nil, err // findings cut short
		}
		for _, f := range findings {
			kind := f.RuleID
			if f.Secret != "" && strings.Contains(text, f.Secret) && !strings.HasPrefix(f.Secret, "[REDACTED:") {
				if _, ok := secrets[f.Secret]; !ok {
					secrets[f.Secret] = kind
				}
				continue
			}
			if newlines == nil {
				newlines = newlineIndex(text)
			}
			if sp, ok := findingSpan(text, newlines, f.StartLine, f.StartColumn, f.EndLine, f.EndColumn); ok {
				sp.start += w.start
				sp.end += w.start
				sp.kind = kind
				spans = append(spans, sp)
			}
		}
	}
	return append(spans, everywhere(s, secrets)...), nil
}

// everywhere finds every occurrence of the secrets in s, one pass per
// distinct length with a rolling hash: linear in s, however many secrets.
func everywhere(s string, secrets map[string]string) []span {
	byLen := map[int]map[uint64][]string{}
	for sec := range secrets {
		n := len(sec)
		if byLen[n] == nil {
			byLen[n] = map[uint64][]string{}
		}
		h := hashOf(sec)
		byLen[n][h] = append(byLen[n][h], sec)
	}
	var out []span
	for n, set := range byLen {
		if n > len(s) {
			continue
		}
		var pow uint64 = 1
		for range n - 1 {
			pow *= hashBase
		}
		h := hashOf(s[:n])
		for i := 0; ; i++ {
			for _, sec := range set[h] {
				if s[i:i+n] == sec {
					out = append(out, span{start: i, end: i + n, kind: secrets[sec]})
				}
			}
			if i+n >= len(s) {
				break
			}
			h = (h-uint64(s[i])*pow)*hashBase + uint64(s[i+n])
		}
	}
	return out
}

const hashBase = 1099511628211

func hashOf(s string) uint64 {
	var h uint64
	for i := 0; i < len(s); i++ {
		h = h*hashBase + uint64(s[i])
	}
	return h
}

// allKnown finds the known values' forms in s, for masking.
func allKnown(s string, forms []string) []span {
	set := map[string]string{}
	for _, f := range forms {
		set[f] = KnownKind
	}
	return everywhere(s, set)
}

// runWindows returns the windows gitleaks decodes an encoded run in: the
// line around it, or, for a run longer than [runChunk], pieces of it that
// start at multiples of 4 bytes from its start (base64's and hex's
// alignment) and overlap by [runOverlap], so a secret is whole in one.
// Small windows keep Go's regexp on its fast backtracking matcher.
func runWindows(s string, w window) []window {
	if w.end-w.start <= runChunk {
		return []window{lineAround(s, w.start, w.end-w.start)}
	}
	var out []window
	for at := w.start; ; at += runChunk - runOverlap {
		start := at
		if at == w.start {
			start = max(0, at-64) // the name before it
		}
		end := min(w.end, at+runChunk)
		out = append(out, window{start, end})
		if end == w.end {
			return out
		}
	}
}

const (
	runChunk   = 4 << 10
	runOverlap = 512
)

// encodedRuns returns the runs of at least n bytes that could be base64,
// hex or percent-encoded text.
func encodedRuns(s string, n int) []window {
	var out []window
	start := -1
	for i := 0; i <= len(s); i++ {
		in := i < len(s) && isEncodedByte(s[i])
		switch {
		case in && start < 0:
			start = i
		case !in && start >= 0:
			if i-start >= n {
				out = append(out, window{start, i})
			}
			start = -1
		}
	}
	return out
}

func isEncodedByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '+' || c == '/' || c == '=' || c == '-' || c == '_' || c == '%'
}

// newlineIndex returns the byte offsets of the newlines of s.
func newlineIndex(s string) []int {
	var nl []int
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			nl = append(nl, i)
		}
	}
	return nl
}

// findingSpan turns gitleaks' line and column numbers back into byte
// offsets: a line's columns count from its preceding newline (1-based on
// the first line).
func findingSpan(s string, nl []int, sl, sc, el, ec int) (span, bool) {
	lineStart := func(l int) int {
		if l <= 0 || len(nl) == 0 {
			return 0
		}
		if l-1 < len(nl) {
			return nl[l-1]
		}
		return nl[len(nl)-1]
	}
	start := lineStart(sl) + sc - 1
	end := lineStart(el) + ec
	if start < 0 || end > len(s) || start >= end {
		return span{}, false
	}
	return span{start: start, end: end}, true
}

// replaceSpans replaces each span, merging overlaps, and keeps any
// "[REDACTED:...]" already in the text whole. With mask, a span becomes as
// many '*' bytes as it has.
func replaceSpans(s string, spans []span, mask bool) string {
	if len(spans) == 0 {
		return s
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	var b strings.Builder
	prev := 0
	for i := 0; i < len(spans); i++ {
		sp := spans[i]
		for i+1 < len(spans) && spans[i+1].start < sp.end {
			sp.end = max(sp.end, spans[i+1].end)
			i++
		}
		if sp.start < prev {
			sp.start = prev
		}
		sp.start, sp.end = widenToMarkers(s, sp.start, sp.end)
		if sp.start < prev {
			sp.start = prev
		}
		if sp.end <= sp.start {
			continue
		}
		b.WriteString(s[prev:sp.start])
		if mask {
			b.WriteString(strings.Repeat("*", sp.end-sp.start))
		} else {
			b.WriteString("[REDACTED:" + sp.kind + "]")
		}
		prev = sp.end
	}
	b.WriteString(s[prev:])
	return b.String()
}

// widenToMarkers grows [start, end) so it never cuts a replacement marker
// in two, which keeps redaction idempotent.
func widenToMarkers(s string, start, end int) (int, int) {
	// A marker is short: look back no further than its longest form.
	const look = 96
	if lo := max(0, start-look); true {
		if i := strings.LastIndex(s[lo:start], "[REDACTED:"); i >= 0 {
			i += lo
			if j := strings.IndexByte(s[i:], ']'); j >= 0 && i+j >= start {
				start = i
			}
		}
	}
	if lo := max(0, end-look); true {
		if i := strings.LastIndex(s[lo:end], "[REDACTED:"); i >= 0 {
			i += lo
			if j := strings.IndexByte(s[i:], ']'); j >= 0 && i+j+1 > end {
				end = i + j + 1
			}
		}
	}
	return start, end
}
