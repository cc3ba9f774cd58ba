package server

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

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

// fileURI is the file:// URI of an output file, each path segment
// percent-encoded: a name holding "%2e%2e", "?", "#" or spaces stays one
// name under /mnt/outputs for any client that decodes it.
func fileURI(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "file:///mnt/outputs/" + strings.Join(parts, "/")
}

// fileContents turns output files, as the sandbox redacted and typed
// them, into MCP content: images as image content, text as text
// resources, other files as blob resources.
func fileContents(files []sandbox.OutputFile) ([]mcp.Content, []FileInfo) {
	var content []mcp.Content
	var infos []FileInfo
	for _, f := range files {
		uri := fileURI(f.Path)
		switch {
		case f.Text:
			content = append(content, mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: uri, MIMEType: f.MIMEType, Text: string(f.Data)}))
		case sandbox.ShownImage(f.MIMEType):
			content = append(content, mcp.NewImageContent(base64.StdEncoding.EncodeToString(f.Data), f.MIMEType))
		default:
			content = append(content, mcp.NewEmbeddedResource(mcp.BlobResourceContents{URI: uri, MIMEType: f.MIMEType, Blob: base64.StdEncoding.EncodeToString(f.Data)}))
		}
		infos = append(infos, FileInfo{Path: f.Path, MIMEType: f.MIMEType, Size: len(f.Data)})
	}
	return content, infos
}
