package sandbox

import (
	"bytes"
	"encoding/binary"
	"path"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// fileType is what pybox knows of a file name's extension. The table is
// pybox's own, never the host's MIME table: what is text, and so redacted
// as text, must not depend on the machine the server runs on.
type fileType struct {
	mime string
	// binary types are sent as blobs whatever their content, since a
	// client opening them needs their bytes (a PDF can be all ASCII).
	binary bool
}

var fileTypes = func() map[string]fileType {
	m := map[string]fileType{}
	text := func(mime string, exts ...string) {
		for _, e := range exts {
			m[e] = fileType{mime: mime}
		}
	}
	bin := func(mime string, exts ...string) {
		for _, e := range exts {
			m[e] = fileType{mime: mime, binary: true}
		}
	}
	text("text/plain", ".txt", ".text", ".log", ".out", ".err", ".cfg", ".conf", ".ini", ".env", ".properties", ".lock",
		".pem", ".key", ".crt", ".cer", ".csr", ".pub", ".asc", ".srt", ".dockerfile", ".gitignore", ".mmd", ".dot", ".gv")
	text("text/csv", ".csv")
	text("text/tab-separated-values", ".tsv", ".tab")
	text("text/markdown", ".md", ".markdown")
	text("text/html", ".html", ".htm")
	text("text/css", ".css")
	text("text/javascript", ".js", ".mjs", ".cjs", ".jsx")
	text("text/x-typescript", ".ts", ".tsx")
	text("text/x-python", ".py", ".pyi", ".pyw")
	text("text/x-shellscript", ".sh", ".bash", ".zsh", ".fish")
	text("text/x-sql", ".sql")
	text("text/x-toml", ".toml")
	text("text/x-rst", ".rst")
	text("text/x-tex", ".tex", ".bib", ".sty")
	text("text/x-diff", ".diff", ".patch")
	text("text/rtf", ".rtf")
	text("text/x-r", ".r", ".rmd")
	text("text/x-c", ".c", ".h", ".cc", ".cpp", ".hpp", ".cxx")
	text("text/x-go", ".go")
	text("text/x-rust", ".rs")
	text("text/x-java", ".java", ".kt", ".scala")
	text("text/x-script", ".rb", ".pl", ".php", ".lua", ".jl", ".swift", ".ps1", ".bat", ".cmd")
	text("text/vtt", ".vtt")
	text("application/json", ".json", ".geojson", ".har")
	text("application/x-ndjson", ".jsonl", ".ndjson")
	text("application/x-ipynb+json", ".ipynb")
	text("application/xml", ".xml", ".xsd", ".xsl", ".rss", ".atom", ".kml", ".gpx")
	text("application/yaml", ".yaml", ".yml")
	text("image/svg+xml", ".svg")
	bin("image/png", ".png")
	bin("image/jpeg", ".jpg", ".jpeg")
	bin("image/gif", ".gif")
	bin("image/webp", ".webp")
	bin("image/bmp", ".bmp")
	bin("image/tiff", ".tif", ".tiff")
	bin("image/x-icon", ".ico")
	bin("application/pdf", ".pdf")
	bin("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", ".xlsx")
	bin("application/vnd.openxmlformats-officedocument.wordprocessingml.document", ".docx")
	bin("application/vnd.openxmlformats-officedocument.presentationml.presentation", ".pptx")
	bin("application/vnd.ms-excel", ".xls")
	bin("application/vnd.oasis.opendocument.spreadsheet", ".ods")
	bin("application/vnd.oasis.opendocument.text", ".odt")
	bin("application/zip", ".zip")
	bin("application/gzip", ".gz", ".tgz")
	bin("application/x-tar", ".tar")
	bin("application/x-bzip2", ".bz2")
	bin("application/x-xz", ".xz")
	bin("application/vnd.apache.parquet", ".parquet")
	bin("application/vnd.apache.arrow.file", ".arrow", ".feather")
	bin("application/x-npy", ".npy")
	bin("application/x-npz", ".npz")
	bin("application/x-python-pickle", ".pkl", ".pickle")
	bin("application/x-hdf5", ".h5", ".hdf5")
	bin("application/vnd.sqlite3", ".sqlite", ".sqlite3", ".db")
	bin("audio/mpeg", ".mp3")
	bin("audio/wav", ".wav")
	bin("audio/ogg", ".ogg")
	bin("video/mp4", ".mp4")
	bin("video/webm", ".webm")
	bin("font/ttf", ".ttf")
	bin("font/otf", ".otf")
	bin("font/woff2", ".woff2")
	return m
}()

// imageMagic are the image types a client can show, by their first bytes.
// An image's type comes from its bytes, never its name: a client shown a
// type its bytes do not have shows nothing.
var imageMagic = []struct {
	mime  string
	match func([]byte) bool
}{
	{"image/png", func(b []byte) bool { return bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) }},
	{"image/jpeg", func(b []byte) bool { return bytes.HasPrefix(b, []byte("\xff\xd8\xff")) }},
	{"image/gif", func(b []byte) bool {
		return bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a"))
	}},
	{"image/webp", func(b []byte) bool { return len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP" }},
}

// ShownImage reports whether an output file of this MIME type is an image
// a client shows: the sandbox gives these types only to files whose bytes
// are such an image.
func ShownImage(mime string) bool {
	for _, m := range imageMagic {
		if m.mime == mime {
			return true
		}
	}
	return false
}

// fileKind is how an output file leaves.
type fileKind int

const (
	kindBlob  fileKind = iota // bytes, secrets starred in place
	kindText                  // text, redacted as text
	kindImage                 // an image a client shows
)

// classify decides how a file leaves and under which MIME type, from its
// name's extension in pybox's table and from its content. For text it
// returns the text as UTF-8, decoded from UTF-16 or Latin-1 when it is not
// UTF-8.
func classify(name string, data []byte) (kind fileKind, mime string, text string) {
	for _, m := range imageMagic {
		if m.match(data) {
			return kindImage, m.mime, ""
		}
	}
	ft, known := fileTypes[strings.ToLower(path.Ext(name))] // ".env" too
	if known && ft.binary {
		if ShownImage(ft.mime) {
			return kindBlob, "application/octet-stream", "" // its bytes say otherwise
		}
		return kindBlob, ft.mime, ""
	}
	t, ok := decodeText(data)
	switch {
	case !ok:
		return kindBlob, "application/octet-stream", ""
	case known:
		return kindText, ft.mime, t
	default:
		return kindText, "text/plain", t
	}
}

// decodeText returns data as UTF-8 text when it is text: UTF-8, UTF-16
// (with a byte-order mark, or with the zero bytes of mostly ASCII text in
// every other byte), or any other single-byte encoding, read as Latin-1 so
// that no byte is lost. Text holds no NUL byte and few control bytes.
func decodeText(data []byte) (string, bool) {
	if len(data) == 0 {
		return "", true
	}
	if order, skip, ok := utf16Order(data); ok {
		body := data[skip:]
		u := make([]uint16, len(body)/2)
		for i := range u {
			u[i] = order.Uint16(body[2*i:])
		}
		s := string(utf16.Decode(u))
		if len(body)%2 == 1 {
			s += "\uFFFD"
		}
		return s, textual(s)
	}
	if !textual(string(data)) {
		return "", false
	}
	if utf8.Valid(data) {
		return string(data), true
	}
	r := make([]rune, len(data))
	for i, c := range data {
		r[i] = rune(c)
	}
	return string(r), true
}

// textual reports whether s has no NUL and at most one control byte in a
// hundred, counting neither tab, newline, carriage return, form feed,
// vertical tab, backspace nor escape.
func textual(s string) bool {
	control := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0:
			return false
		case c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '\b' || c == 0x1b:
		case c < 0x20 || c == 0x7f:
			control++
		}
	}
	return control <= len(s)/100
}

// utf16Order finds UTF-16 by its byte-order mark, or, without one, by zero
// bytes in most of one half of the first 4 KiB and almost none in the
// other, as UTF-16 of mostly ASCII text has.
func utf16Order(data []byte) (binary.ByteOrder, int, bool) {
	switch {
	case bytes.HasPrefix(data, []byte{0xff, 0xfe}):
		return binary.LittleEndian, 2, true
	case bytes.HasPrefix(data, []byte{0xfe, 0xff}):
		return binary.BigEndian, 2, true
	}
	sample := data[:min(len(data), 4096)]
	if len(sample) < 8 {
		return nil, 0, false
	}
	var even, odd int
	for i, c := range sample {
		if c == 0 {
			if i%2 == 0 {
				even++
			} else {
				odd++
			}
		}
	}
	half := len(sample) / 2
	switch {
	case odd*10 >= half*7 && even*20 <= half:
		return binary.LittleEndian, 0, true
	case even*10 >= half*7 && odd*20 <= half:
		return binary.BigEndian, 0, true
	}
	return nil, 0, false
}
