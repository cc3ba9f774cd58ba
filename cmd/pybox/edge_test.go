package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pybox/pybox/server"
)

func TestParseAuthTokens(t *testing.T) {
	got, err := parseAuthTokens([]string{"alice:0123456789abcdef0", "fedcba9876543210x", "ci.bot@x:tok:with:colons-123456"})
	if err != nil {
		t.Fatal(err)
	}
	want := []authToken{{"alice", "0123456789abcdef0"}, {"token2", "fedcba9876543210x"}, {"ci.bot@x", "tok:with:colons-123456"}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("token %d = %+v; want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range [][]string{{"short"}, {"a:0123456789abcdef0", "a:fedcba9876543210x"}, {""}} {
		if _, err := parseAuthTokens(bad); err == nil {
			t.Errorf("parseAuthTokens(%q) accepted", bad)
		}
	}
}

// TestEdge: the HTTP edge in front of a handler that, like the MCP
// library's SSE handler, sets a wildcard CORS header.
func TestEdge(t *testing.T) {
	policy, err := parseOrigins([]string{"https://app.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := parseAuthTokens([]string{"alice:0123456789abcdef0"})
	var principal string
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		principal = server.Owner(r.Context())
		w.WriteHeader(http.StatusOK)
	})
	h := guardOrigin(policy)(bearerAuth(tokens)(requireJSON(inner)))
	tests := []struct {
		name, method, origin, ctype, auth string
		status                            int
		acao                              string
	}{
		{"no origin", "POST", "", "application/json", "Bearer 0123456789abcdef0", 200, ""},
		{"loopback page", "POST", "http://localhost:6274", "application/json; charset=utf-8", "Bearer 0123456789abcdef0", 200, "http://localhost:6274"},
		{"loopback address page", "GET", "http://127.0.0.1:3000", "", "Bearer 0123456789abcdef0", 200, "http://127.0.0.1:3000"},
		{"allowed page", "POST", "https://app.example.com", "application/json", "Bearer 0123456789abcdef0", 200, "https://app.example.com"},
		{"same host, other port", "POST", "https://app.example.com:8443", "application/json", "Bearer 0123456789abcdef0", 403, ""},
		{"other page", "POST", "http://evil.example", "application/json", "Bearer 0123456789abcdef0", 403, ""},
		{"rebinding page", "POST", "http://localhost.evil.example", "application/json", "Bearer 0123456789abcdef0", 403, ""},
		{"file page", "POST", "null", "application/json", "Bearer 0123456789abcdef0", 403, ""},
		{"text/plain", "POST", "", "text/plain", "Bearer 0123456789abcdef0", 415, ""},
		{"form", "POST", "http://localhost:1", "application/x-www-form-urlencoded", "Bearer 0123456789abcdef0", 415, "http://localhost:1"},
		{"no token", "POST", "", "application/json", "", 401, ""},
		{"preflight", "OPTIONS", "https://app.example.com", "", "", 204, "https://app.example.com"},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, "/mcp", strings.NewReader("{}"))
		if tt.origin != "" {
			req.Header.Set("Origin", tt.origin)
		}
		if tt.ctype != "" {
			req.Header.Set("Content-Type", tt.ctype)
		}
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		if tt.method == "OPTIONS" {
			req.Header.Set("Access-Control-Request-Method", "POST")
		}
		rec := httptest.NewRecorder()
		principal = ""
		h.ServeHTTP(rec, req)
		if rec.Code != tt.status || rec.Header().Get("Access-Control-Allow-Origin") != tt.acao {
			t.Errorf("%s: HTTP %d, Access-Control-Allow-Origin %q; want %d, %q", tt.name, rec.Code, rec.Header().Get("Access-Control-Allow-Origin"), tt.status, tt.acao)
		}
		if rec.Code == 200 && principal != "principal:alice" {
			t.Errorf("%s: the request's owner is %q; want alice's principal", tt.name, principal)
		}
		if rec.Code >= 400 && !strings.Contains(rec.Body.String(), `"jsonrpc":"2.0"`) {
			t.Errorf("%s: the refusal is not JSON-RPC: %s", tt.name, rec.Body.String())
		}
	}
}

func TestTaskEventsStayWithTheirConnection(t *testing.T) {
	owns := func(session, task string) bool { return session+"/"+task == "s1/mine" }
	status := func(task string) string {
		return `event: message` + "\n" + `data: {"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"` + task + `","status":"completed"}}` + "\n\n"
	}
	result := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n\n"
	for _, tc := range []struct {
		name, session string
		events        []string
		want          string
	}{
		{"streamable", "s1", []string{status("mine"), status("theirs"), result}, status("mine") + result},
		{"no session", "", []string{status("mine"), result}, result},
		// The SSE transport names its session in the endpoint event.
		{"sse", "", []string{"event: endpoint\ndata: /message?sessionId=s1\r\n\r\n", status("theirs"), status("mine")},
			"event: endpoint\ndata: /message?sessionId=s1\r\n\r\n" + status("mine")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := taskEvents(owns)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, ev := range tc.events {
					// In two pieces: an event may come in several writes.
					half := len(ev) / 2
					w.Write([]byte(ev[:half]))
					w.Write([]byte(ev[half:]))
					w.(http.Flusher).Flush()
				}
			}))
			req := httptest.NewRequest("GET", "/mcp", nil)
			if tc.session != "" {
				req.Header.Set("Mcp-Session-Id", tc.session)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if got := rec.Body.String(); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	// A JSON answer passes untouched.
	h := taskEvents(owns)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"theirs"}}`))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/mcp", nil))
	if !strings.Contains(rec.Body.String(), "theirs") {
		t.Error("a JSON body was filtered")
	}
}
