package sandbox

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/pybox/pybox/redact"
)

var (
	testToken = "ghp_" + strings.Repeat("Zq9xW2", 6)
	testKey   = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA" + strings.Repeat("q8Zx", 40) + "\n-----END RSA PRIVATE KEY-----\n"
)

func utf16le(s string, bom bool) []byte {
	var b bytes.Buffer
	if bom {
		b.Write([]byte{0xff, 0xfe})
	}
	for _, u := range utf16.Encode([]rune(s)) {
		binary.Write(&b, binary.LittleEndian, u)
	}
	return b.Bytes()
}

func TestClassify(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	tests := []struct {
		name string
		data []byte
		kind fileKind
		mime string
		text string
	}{
		{"a.csv", []byte("a,b\n1,2\n"), kindText, "text/csv", "a,b\n1,2\n"},
		{"key.pem", []byte(testKey), kindText, "text/plain", testKey},
		{"run.sh", []byte("echo hi\n"), kindText, "text/x-shellscript", "echo hi\n"},
		{"notes", []byte("plain words\n"), kindText, "text/plain", "plain words\n"},
		{"latin1.csv", []byte("caf\xe9,na\xefve\n"), kindText, "text/csv", "café,naïve\n"},
		{"bom16.txt", utf16le("hé there", true), kindText, "text/plain", "hé there"},
		{"nobom16.log", utf16le("plain ascii text, long enough", false), kindText, "text/plain", "plain ascii text, long enough"},
		{"picture.txt", png, kindImage, "image/png", ""},
		{"fake.png", []byte("not a png at all"), kindBlob, "application/octet-stream", ""},
		{"report.pdf", []byte("%PDF-1.4 all ascii"), kindBlob, "application/pdf", ""},
		{"data.bin", []byte("\x00\x01\x02binary"), kindBlob, "application/octet-stream", ""},
		{"empty.txt", nil, kindText, "text/plain", ""},
	}
	for _, tt := range tests {
		kind, mime, text := classify(tt.name, tt.data)
		if kind != tt.kind || mime != tt.mime || text != tt.text {
			t.Errorf("classify(%q) = %v, %q, %q; want %v, %q, %q", tt.name, kind, mime, text, tt.kind, tt.mime, tt.text)
		}
	}
}

func zipOf(t *testing.T, name, content string) []byte {
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	w, _ := z.Create(name)
	w.Write([]byte(content))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gzipOf(content []byte) []byte {
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	z.Write(content)
	z.Close()
	return b.Bytes()
}

func cleanSandbox() *Sandbox {
	return &Sandbox{opt: resolved{Options: Options{Redact: redact.MustNew(redact.Options{})}}}
}

// TestCleanRedactsEverythingTextual: names, text files of any extension
// and encoding, and text inside binary files are redacted; a secret inside
// compressed content withholds its file.
func TestCleanRedactsEverythingTextual(t *testing.T) {
	s := cleanSandbox()
	out := newCallOut(1, 1000, nil)
	out.stdout.Write([]byte("token " + testToken + "\n"))
	files := []OutputFile{
		{Path: "dir/" + testToken + ".txt", Data: []byte("one")},
		{Path: "dir/" + strings.Replace(testToken, "Zq", "Yq", 1) + ".txt", Data: []byte("two")},
		{Path: "latin1.csv", Data: []byte("caf\xe9," + testToken + "\n")},
		{Path: "id_rsa.key", Data: []byte(testKey)},
		{Path: "wide.txt", Data: utf16le("token="+testToken, true)},
		{Path: "blob.bin", Data: []byte("\x00\x01" + testToken + "\x00\xff")},
		{Path: "book.xlsx", Data: zipOf(t, "xl/sharedStrings.xml", "<t>"+testToken+"</t>")},
		{Path: "rows.csv.gz", Data: gzipOf([]byte("k," + testToken + "\n"))},
		{Path: "clean.xlsx", Data: zipOf(t, "xl/sharedStrings.xml", "<t>nothing secret</t>")},
	}
	c := s.clean(context.Background(), out, files, time.Now().Add(time.Minute))
	if strings.Contains(c.stdout, testToken) {
		t.Errorf("stdout: %q", c.stdout)
	}
	got := map[string]OutputFile{}
	for _, f := range c.files {
		got[f.Path] = f
		if strings.Contains(f.Path, testToken) || strings.Contains(string(f.Data), testToken) || strings.Contains(string(f.Data), "q8Zxq8Zx") {
			t.Errorf("%q leaks: %q", f.Path, f.Data)
		}
	}
	for _, want := range []string{"dir/[REDACTED:github_token].txt", "dir/[REDACTED:github_token]-2.txt", "latin1.csv", "id_rsa.key", "wide.txt", "blob.bin", "clean.xlsx"} {
		if _, ok := got[want]; !ok {
			t.Errorf("no file %q among %v", want, fileNames(got))
		}
	}
	if f := got["latin1.csv"]; !f.Text || !strings.HasPrefix(string(f.Data), "café,[REDACTED:") {
		t.Errorf("latin1.csv = %+v; want UTF-8 text, redacted", f)
	}
	if f := got["blob.bin"]; f.Text || len(f.Data) != len(files[5].Data) {
		t.Errorf("blob.bin = %q; want the same length, starred", f.Data)
	}
	notes := strings.Join(c.notes, "\n")
	for _, want := range []string{"book.xlsx", "rows.csv.gz"} {
		if _, ok := got[want]; ok || !strings.Contains(notes, want+" (") || !strings.Contains(notes, "holds a secret") {
			t.Errorf("%s: not withheld with a note: %s", want, notes)
		}
	}
}

func fileNames(m map[string]OutputFile) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestCleanWithholdsPastBudget: what is not redacted within the call's
// budget is withheld with a note, never sent as it is; the streams, which
// are small, are still redacted.
func TestCleanWithholdsPastBudget(t *testing.T) {
	s := cleanSandbox()
	out := newCallOut(1, 1000, nil)
	out.stderr.Write([]byte("Traceback: " + testToken + "\n"))
	var dense strings.Builder
	for i := 0; dense.Len() < 4<<20; i++ {
		dense.WriteString("api_key=" + testToken + "\n")
	}
	files := []OutputFile{{Path: "dense.txt", Data: []byte(dense.String())}}
	c := s.clean(context.Background(), out, files, time.Now().Add(-time.Second))
	if len(c.files) != 0 {
		t.Fatalf("a 4 MiB credential-dense file came back within %v of budget: %d files", filesFloor, len(c.files))
	}
	if len(c.notes) != 1 || !strings.Contains(c.notes[0], "dense.txt") || !strings.Contains(c.notes[0], "withheld") {
		t.Fatalf("notes = %q; want one saying dense.txt was withheld", c.notes)
	}
	if !strings.Contains(c.stderr, "[REDACTED:") || strings.Contains(c.stderr, testToken) {
		t.Fatalf("stderr = %q; want it redacted", c.stderr)
	}
}

// TestPackedBudget: compressed content that unpacks past the limit is
// not searched to its end; the file is withheld.
func TestPackedBudget(t *testing.T) {
	r := redact.MustNew(redact.Options{})
	data := gzipOf(bytes.Repeat([]byte("a"), 3<<20))
	found, over, err := packedSecret(context.Background(), r, data, 2<<20)
	if err != nil || found != "" || !over {
		t.Fatalf("packedSecret = %q, %v, %v; want over", found, over, err)
	}
	found, over, err = packedSecret(context.Background(), r, data, 4<<20)
	if err != nil || found != "" || over {
		t.Fatalf("packedSecret under its limit = %q, %v, %v; want nothing", found, over, err)
	}
}
