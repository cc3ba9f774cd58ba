package server

import (
	"encoding/base64"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pybox/pybox/redact"
	"github.com/pybox/pybox/sandbox"
)

// FileInfo describes an output file in the tool's structured result.
type FileInfo struct {
	Path     string `json:"path"`
	MIMEType string `json:"mime_type"`
	Size     int    `json:"size"`
}

// parseFiles reads the files argument: [{path, content, encoding}].
func parseFiles(v any) ([]sandbox.InputFile, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf(`"files" must be an array of {"path", "content", "encoding"}, not %s`, jsonType(v))
	}
	var out []sandbox.InputFile
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf(`files[%d] must be an object {"path", "content", "encoding"}, not %s`, i, jsonType(item))
		}
		for k := range m {
			if k != "path" && k != "content" && k != "encoding" {
				return nil, fmt.Errorf(`files[%d]: unknown field %q; the fields are path, content and encoding`, i, k)
			}
		}
		p, ok := m["path"].(string)
		if !ok {
			return nil, fmt.Errorf(`files[%d]: "path" must be a string`, i)
		}
		content, ok := m["content"].(string)
		if !ok {
			return nil, fmt.Errorf(`files[%d] %q: "content" must be a string`, i, p)
		}
		enc := "utf-8"
		if e, ok := m["encoding"]; ok && e != nil {
			if enc, ok = e.(string); !ok {
				return nil, fmt.Errorf(`files[%d] %q: "encoding" must be "utf-8" or "base64"`, i, p)
			}
		}
		var data []byte
		switch strings.ToLower(enc) {
		case "utf-8", "utf8", "":
			data = []byte(content)
		case "base64":
			d, err := base64.StdEncoding.DecodeString(content)
			if err != nil {
				return nil, fmt.Errorf(`files[%d] %q: "content" is not valid base64: %v`, i, p, err)
			}
			data = d
		default:
			return nil, fmt.Errorf(`files[%d] %q: encoding %q; use "utf-8" or "base64"`, i, p, enc)
		}
		out = append(out, sandbox.InputFile{Path: p, Data: data})
	}
	return out, nil
}

// imageTypes are the MIME types sent as MCP image content.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true, "image/svg+xml": true}

// mimeType names a file's type by its extension, then by its content.
func mimeType(name string, data []byte) string {
	ext := strings.ToLower(path.Ext(name))
	known := map[string]string{
		".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
		".svg": "image/svg+xml", ".csv": "text/csv", ".txt": "text/plain", ".md": "text/markdown", ".json": "application/json",
		".html": "text/html", ".xml": "application/xml", ".py": "text/x-python", ".tsv": "text/tab-separated-values",
		".pdf": "application/pdf", ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
		".parquet": "application/vnd.apache.parquet", ".log": "text/plain", ".yaml": "application/yaml", ".yml": "application/yaml",
	}
	t, ok := known[ext]
	if !ok {
		t = mime.TypeByExtension(ext)
	}
	if t == "" {
		t = http.DetectContentType(data)
	}
	if i := strings.IndexByte(t, ';'); i >= 0 {
		t = strings.TrimSpace(t[:i])
	}
	// An image type must be true to the content, or the client shows
	// nothing: trust the bytes over the name.
	if imageTypes[t] && t != "image/svg+xml" {
		if sniffed := http.DetectContentType(data); strings.HasPrefix(sniffed, "image/") {
			t = sniffed
		} else {
			t = "application/octet-stream"
		}
	}
	return t
}

func isText(t string, data []byte) bool {
	textual := strings.HasPrefix(t, "text/") || t == "application/json" || t == "application/xml" || t == "application/yaml" || t == "image/svg+xml"
	return textual && utf8.Valid(data)
}

// fileContents turns output files into MCP content: images as image
// content, text (redacted) and other files as embedded resources.
func fileContents(files []sandbox.OutputFile, rd *redact.Redactor) ([]mcp.Content, []FileInfo) {
	var content []mcp.Content
	var infos []FileInfo
	for _, f := range files {
		t := mimeType(f.Path, f.Data)
		data := f.Data
		uri := "file:///mnt/outputs/" + f.Path
		switch {
		case imageTypes[t] && t != "image/svg+xml":
			content = append(content, mcp.NewImageContent(base64.StdEncoding.EncodeToString(data), t))
		case isText(t, data):
			text := rd.String(string(data))
			data = []byte(text)
			content = append(content, mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: uri, MIMEType: t, Text: text}))
		default:
			content = append(content, mcp.NewEmbeddedResource(mcp.BlobResourceContents{URI: uri, MIMEType: t, Blob: base64.StdEncoding.EncodeToString(data)}))
		}
		infos = append(infos, FileInfo{Path: f.Path, MIMEType: t, Size: len(data)})
	}
	return content, infos
}
