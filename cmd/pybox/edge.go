package main

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/pybox/pybox/server"
)

// The HTTP edge: what every request to /mcp, /sse and /message passes
// before the MCP library sees it, outermost first:
//
//  1. Origin: a browser names the page that sent a request in Origin; only
//     loopback pages and the origins --allowed-origin names may reach the
//     server. A request with no Origin is not from a browser page.
//  2. CORS: no wildcard ever; an allowed origin gets its own name back and
//     its preflight answered.
//  3. The bearer token, when any is set; its name becomes the principal
//     that owns sessions where the protocol has no connection.
//  4. POST bodies must say application/json, so a page cannot send one as
//     a "simple" text/plain request that skips the preflight.
//  5. The body limit, before the body is read.

// authToken is a bearer token and the principal it names.
type authToken struct {
	name, token string
}

var principalName = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)

// parseAuthTokens reads --auth-token values: "TOKEN", or "NAME:TOKEN" to
// name its principal. A value is split at its first ':' only when what is
// before is a name. An unnamed token's principal is "token<N>", N its
// place among the values.
func parseAuthTokens(values []string) ([]authToken, error) {
	var out []authToken
	names := map[string]bool{}
	for i, v := range values {
		v = strings.TrimSpace(v)
		t := authToken{name: fmt.Sprintf("token%d", i+1), token: v}
		if name, tok, ok := strings.Cut(v, ":"); ok && principalName.MatchString(name) {
			t = authToken{name: name, token: tok}
		}
		switch {
		case t.token == "":
			return nil, fmt.Errorf("--auth-token %d is empty", i+1)
		case len(t.token) < 16:
			return nil, fmt.Errorf("--auth-token %q: a token must be at least 16 characters (try `openssl rand -hex 32`)", t.name)
		case names[t.name]:
			return nil, fmt.Errorf("--auth-token: the name %q is given twice", t.name)
		}
		names[t.name] = true
		out = append(out, t)
	}
	return out, nil
}

// bearerAuth requires "Authorization: Bearer <token>" with one of tokens,
// when any is set, and marks the request with the token's principal.
func bearerAuth(tokens []authToken) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if len(tokens) == 0 {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := []byte(r.Header.Get("Authorization"))
			who := ""
			for _, t := range tokens { // every token compared, in constant time
				if subtle.ConstantTimeCompare(got, []byte("Bearer "+t.token)) == 1 {
					who = t.name
				}
			}
			if who == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="pybox"`)
				jsonError(w, http.StatusUnauthorized, "pybox: missing or wrong bearer token")
				return
			}
			next.ServeHTTP(w, r.WithContext(server.WithPrincipal(r.Context(), who)))
		})
	}
}

// originPolicy decides which browser origins may reach the server.
type originPolicy struct {
	allowed map[string]bool // normalized scheme://host:port
}

// parseOrigins reads --allowed-origin values: full origins such as
// https://app.example.com or http://localhost:3000.
func parseOrigins(values []string) (originPolicy, error) {
	p := originPolicy{allowed: map[string]bool{}}
	for _, v := range values {
		v = strings.TrimSpace(v)
		n, ok := normalizeOrigin(v)
		if !ok {
			return p, fmt.Errorf("--allowed-origin %q: give an origin such as https://app.example.com (scheme, host and port only; no wildcard)", v)
		}
		p.allowed[n] = true
	}
	return p, nil
}

// normalizeOrigin returns an origin as scheme://host:port, lower case,
// with the scheme's default port filled in.
func normalizeOrigin(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(net.JoinHostPort(host, port)), true
}

// allows reports whether a page of origin may reach the server: a loopback
// page (localhost or a loopback address, any port) or a named one.
func (p originPolicy) allows(origin string) bool {
	n, ok := normalizeOrigin(origin)
	if !ok {
		return false // "null" (a file or sandboxed page) included
	}
	u, _ := url.Parse(n)
	host := u.Hostname()
	if isLoopback(host) || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	return p.allowed[n]
}

// corsHeaders are what a browser client of MCP sends and reads.
const (
	corsMethods       = "GET, POST, DELETE, OPTIONS"
	corsAllowHeaders  = "Authorization, Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID"
	corsExposeHeaders = "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate"
)

// guardOrigin refuses requests from browser pages of other origins, and
// answers the CORS of allowed ones itself: the MCP library's own CORS
// headers (a wildcard, on SSE) never leave.
func guardOrigin(p originPolicy) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			origin := r.Header.Get("Origin")
			if origin != "" && !p.allows(origin) {
				jsonError(w, http.StatusForbidden, fmt.Sprintf("pybox: requests from web pages of origin %q are refused; only loopback origins and those given with --allowed-origin may call this server", clipOrigin(origin)))
				return
			}
			cw := &corsWriter{ResponseWriter: w, origin: origin}
			if origin != "" {
				h := w.Header()
				h.Set("Access-Control-Allow-Origin", origin)
				h.Add("Vary", "Origin")
				h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
				if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
					h.Set("Access-Control-Allow-Methods", corsMethods)
					h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
					h.Set("Access-Control-Max-Age", "600")
					w.WriteHeader(http.StatusNoContent)
					return
				}
			}
			next.ServeHTTP(cw, r)
		})
	}
}

func clipOrigin(o string) string {
	if len(o) > 100 {
		return o[:100] + "..."
	}
	return o
}

// corsWriter keeps the CORS headers to the edge's own: whatever the
// handler behind set is replaced before the header is written.
type corsWriter struct {
	http.ResponseWriter
	origin  string
	written bool
}

func (c *corsWriter) fix() {
	if c.written {
		return
	}
	c.written = true
	h := c.ResponseWriter.Header()
	if c.origin == "" {
		for k := range h {
			if strings.HasPrefix(k, "Access-Control-") {
				h.Del(k)
			}
		}
		return
	}
	h.Set("Access-Control-Allow-Origin", c.origin)
	h.Del("Access-Control-Allow-Credentials")
}

func (c *corsWriter) WriteHeader(code int) {
	c.fix()
	c.ResponseWriter.WriteHeader(code)
}

func (c *corsWriter) Write(p []byte) (int, error) {
	c.fix()
	return c.ResponseWriter.Write(p)
}

func (c *corsWriter) Flush() {
	c.fix()
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (c *corsWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// requireJSON refuses a POST whose body is not declared application/json.
func requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			t, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || t != "application/json" {
				jsonError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("pybox: a POST body must be JSON-RPC sent as Content-Type: application/json, not %q", clipOrigin(r.Header.Get("Content-Type"))))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// jsonError answers with a JSON-RPC error and an HTTP status.
func jsonError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -32600, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// taskEvents keeps each connection to its own tasks' events: mcp-go sends
// notifications/tasks/status to every connection, so on an event stream
// (Streamable HTTP's, or the SSE transport's) a status event is passed on
// only to the connection whose task it is. The connection is the request's
// Mcp-Session-Id, or the one the SSE transport's endpoint event names.
func taskEvents(owns func(mcpSession, taskID string) bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(&eventFilter{ResponseWriter: w, session: r.Header.Get("Mcp-Session-Id"), owns: owns}, r)
		})
	}
}

type eventFilter struct {
	http.ResponseWriter
	session string
	owns    func(mcpSession, taskID string) bool

	decided, stream bool
	buf             []byte // an event not yet whole
}

func (f *eventFilter) Write(p []byte) (int, error) {
	if !f.decided {
		f.decided = true
		f.stream = strings.HasPrefix(f.Header().Get("Content-Type"), "text/event-stream")
	}
	if !f.stream {
		return f.ResponseWriter.Write(p)
	}
	f.buf = append(f.buf, p...)
	for {
		end, sep := eventEnd(f.buf)
		if end < 0 {
			return len(p), nil
		}
		ev := f.buf[:end+sep]
		if f.keep(ev[:end]) {
			if _, err := f.ResponseWriter.Write(ev); err != nil {
				return 0, err
			}
		}
		f.buf = f.buf[end+sep:]
	}
}

// eventEnd finds the blank line that ends an event: its index and length.
func eventEnd(b []byte) (int, int) {
	for i := 0; i+1 < len(b); i++ {
		if b[i] != '\n' && b[i] != '\r' {
			continue
		}
		switch {
		case b[i] == '\n' && b[i+1] == '\n':
			return i, 2
		case i+3 < len(b) && string(b[i:i+4]) == "\r\n\r\n":
			return i, 4
		}
	}
	return -1, 0
}

// keep decides on one event.
func (f *eventFilter) keep(ev []byte) bool {
	var name, data string
	for _, line := range strings.Split(string(ev), "\n") {
		line = strings.TrimRight(line, "\r")
		if v, ok := strings.CutPrefix(line, "event:"); ok {
			name = strings.TrimSpace(v)
		} else if v, ok := strings.CutPrefix(line, "data:"); ok {
			data += strings.TrimPrefix(v, " ")
		}
	}
	if name == "endpoint" && f.session == "" {
		if u, err := url.Parse(strings.TrimSpace(data)); err == nil {
			f.session = u.Query().Get("sessionId")
		}
		return true
	}
	if !strings.Contains(data, `"notifications/tasks/status"`) {
		return true
	}
	var n struct {
		Method string `json:"method"`
		Params struct {
			TaskID string `json:"taskId"`
		} `json:"params"`
	}
	if json.Unmarshal([]byte(data), &n) != nil || n.Method != "notifications/tasks/status" {
		return true
	}
	return f.owns(f.session, n.Params.TaskID)
}

func (f *eventFilter) Flush() {
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

func (f *eventFilter) Unwrap() http.ResponseWriter { return f.ResponseWriter }
