package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/rs/zerolog"

	"github.com/pybox/pybox/internal/testenv"
	"github.com/pybox/pybox/redact"
	"github.com/pybox/pybox/sandbox"
)

func realServer(t testing.TB, opt sandbox.Options) Options {
	t.Helper()
	opt.Image = testenv.Image(sandbox.DefaultImage)
	testenv.Engine(t, opt.Image)
	rd := redact.MustNew(redact.Options{})
	opt.Redact = rd
	sb, err := sandbox.New(opt, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return Options{Runner: sb, Redactor: rd}
}

func TestFilesThroughMCP(t *testing.T) {
	c := connect(t, realServer(t, sandbox.Options{MaxOutputFileBytes: 6 << 20}))
	big := make([]byte, 5<<20)
	rand.Read(big)
	res, out := call(t, c, map[string]any{
		"code": `import shutil
shutil.copy("/mnt/user-data/in/big.bin", "/mnt/outputs/copy.bin")
open("/mnt/outputs/report.csv", "w").write("key,value\nanthropic,sk-ant-api03-` + strings.Repeat("Q", 40) + `\n")
open("/mnt/outputs/too-big.bin", "wb").write(b"z" * (7 << 20))
print(open("/mnt/user-data/note.txt").read())
`,
		"files": []any{
			map[string]any{"path": "in/big.bin", "content": base64.StdEncoding.EncodeToString(big), "encoding": "base64"},
			map[string]any{"path": "note.txt", "content": "héllo"},
		},
		"timeout": 60,
	})
	if res.IsError || out.ExitCode != 0 || out.Stdout != "héllo\n" {
		t.Fatalf("isError %v, %+v", res.IsError, out)
	}
	var blob *mcp.BlobResourceContents
	var text *mcp.TextResourceContents
	for _, c := range res.Content {
		if e, ok := c.(mcp.EmbeddedResource); ok {
			switch r := e.Resource.(type) {
			case mcp.BlobResourceContents:
				if strings.HasSuffix(r.URI, "copy.bin") {
					blob = &r
				}
			case mcp.TextResourceContents:
				text = &r
			}
		}
	}
	if blob == nil {
		t.Fatalf("no blob resource for copy.bin in %d contents", len(res.Content))
	}
	got, _ := base64.StdEncoding.DecodeString(blob.Blob)
	if !bytes.Equal(got, big) {
		t.Errorf("the 5 MB binary did not round-trip byte-exact: %d bytes back", len(got))
	}
	if text == nil || text.MIMEType != "text/csv" || strings.Contains(text.Text, "QQQQQQQQ") || !strings.Contains(text.Text, "[REDACTED:") {
		t.Errorf("the CSV output: %+v; want a text resource, redacted", text)
	}
	if !strings.Contains(out.Stderr, "too-big.bin left out") {
		t.Errorf("stderr %q does not name the file over the limit", out.Stderr)
	}
	want := map[string]string{"copy.bin": "application/octet-stream", "report.csv": "text/csv"}
	for _, f := range out.Files {
		if want[f.Path] != f.MIMEType {
			t.Errorf("files lists %s as %s", f.Path, f.MIMEType)
		}
		delete(want, f.Path)
	}
	if len(want) > 0 {
		t.Errorf("files lacks %v: %+v", want, out.Files)
	}
}

func TestFilesInvalidInput(t *testing.T) {
	c := connect(t, realServer(t, sandbox.Options{}))
	tests := []struct {
		name  string
		files any
		want  string
	}{
		{"not an array", "x", `"files" must be an array`},
		{"dot dot", []any{map[string]any{"path": "../x", "content": ""}}, `files[0] "../x": ".." is not allowed`},
		{"absolute", []any{map[string]any{"path": "/etc/x", "content": ""}}, "not absolute"},
		{"bad base64", []any{map[string]any{"path": "a", "content": "%%%", "encoding": "base64"}}, "not valid base64"},
		{"bad encoding", []any{map[string]any{"path": "a", "content": "", "encoding": "latin-1"}}, `encoding "latin-1"`},
		{"no content", []any{map[string]any{"path": "a"}}, `"content" must be a string`},
		{"duplicate", []any{map[string]any{"path": "a", "content": ""}, map[string]any{"path": "a", "content": ""}}, "given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out := call(t, c, map[string]any{"code": "print(1)", "files": tt.files})
			if !res.IsError || out.Error != "invalid_input" || !strings.Contains(out.Stderr, tt.want) {
				t.Errorf("isError %v, %+v; want invalid_input saying %q", res.IsError, out, tt.want)
			}
		})
	}
}
