package sandbox

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
)

// frameWriter reads the supervisor's stdout: a handshake line with the
// call's nonce, the code's stdout (passed on to out), then the end marker,
// a JSON trailer line and the output files as a tar stream. Only the
// supervisor knows the nonce, so the code cannot end its stdout early. The
// marker may be split across writes. It is safe for concurrent use.
type frameWriter struct {
	mu         sync.Mutex
	out        io.Writer
	state      int
	line       []byte // the handshake or the trailer so far
	marker     []byte // "\x00PYBOX-END <nonce>\n"
	held       []byte // a possible start of the marker, held back
	trailer    trailer
	archive    bytes.Buffer
	archiveMax int
	overflow   bool
}

const (
	frameHandshake = iota
	frameStdout
	frameTrailer
	frameArchive
)

// maxFrameLine bounds the handshake and the trailer lines.
const maxFrameLine = 64 << 10

// trailer is what the supervisor says at the end of a call.
type trailer struct {
	ExitCode *int `json:"exit_code"`
	Archive  int  `json:"archive"`
	Worker   struct {
		Skipped []struct {
			Path string `json:"path"`
			Why  string `json:"why"`
		} `json:"skipped"`
		SkippedCount int  `json:"skipped_count"`
		Malformed    bool `json:"malformed"`
	} `json:"worker"`
}

func newFrameWriter(out io.Writer, archiveMax int) *frameWriter {
	return &frameWriter{out: out, archiveMax: archiveMax}
}

func (f *frameWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		switch f.state {
		case frameHandshake, frameTrailer:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				f.line = append(f.line, p[:min(len(p), maxFrameLine-len(f.line))]...)
				return n, nil
			}
			f.line = append(f.line, p[:min(i, maxFrameLine-len(f.line))]...)
			p = p[i+1:]
			f.endLine()
		case frameStdout:
			p = f.stdout(p)
		case frameArchive:
			if room := f.archiveMax - f.archive.Len(); room > 0 {
				f.archive.Write(p[:min(room, len(p))])
			}
			if f.archive.Len()+len(p) > f.archiveMax {
				f.overflow = true
			}
			return n, nil
		}
	}
	return n, nil
}

func (f *frameWriter) endLine() {
	line := string(f.line)
	f.line = f.line[:0]
	switch f.state {
	case frameHandshake:
		nonce, ok := strings.CutPrefix(line, "PYBOX-READY ")
		if !ok || len(nonce) != 32 {
			// Not the supervisor's handshake: everything is the code's.
			f.state = frameStdout
			f.out.Write([]byte(line + "\n"))
			return
		}
		f.marker = []byte("\x00PYBOX-END " + nonce + "\n")
		f.state = frameStdout
	case frameTrailer:
		if err := json.Unmarshal([]byte(line), &f.trailer); err != nil {
			f.trailer.Worker.Malformed = true
		}
		f.state = frameArchive
	}
}

// stdout passes the code's output on until the marker, and returns what
// follows the marker.
func (f *frameWriter) stdout(p []byte) []byte {
	if f.marker == nil {
		f.out.Write(p)
		return nil
	}
	if len(f.held) > 0 {
		// Complete or refute the held start of the marker.
		need := len(f.marker) - len(f.held)
		k := min(need, len(p))
		if !bytes.Equal(f.marker[len(f.held):len(f.held)+k], p[:k]) {
			f.out.Write(f.held[:1])
			rest := append(append([]byte(nil), f.held[1:]...), p...)
			f.held = f.held[:0]
			return rest
		}
		f.held = append(f.held, p[:k]...)
		p = p[k:]
		if len(f.held) == len(f.marker) {
			f.held = f.held[:0]
			f.state = frameTrailer
		}
		return p
	}
	i := bytes.IndexByte(p, 0)
	if i < 0 {
		f.out.Write(p)
		return nil
	}
	f.out.Write(p[:i])
	p = p[i:]
	k := min(len(f.marker), len(p))
	if !bytes.Equal(f.marker[:k], p[:k]) {
		f.out.Write(p[:1])
		return p[1:]
	}
	if k < len(f.marker) {
		f.held = append(f.held[:0], p...)
		return nil
	}
	f.state = frameTrailer
	return p[k:]
}

// finish reports the trailer, if the call got that far, and the output
// files found in the archive, checked against the limits.
func (f *frameWriter) finish(lim outputLimits) (t *trailer, files []OutputFile, notes []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.held) > 0 {
		f.out.Write(f.held)
		f.held = nil
	}
	if f.state != frameArchive {
		return nil, nil, nil
	}
	t = &f.trailer
	if t.Worker.Malformed {
		notes = append(notes, "the sandbox's report on output files was malformed; files may be missing")
	}
	for _, s := range t.Worker.Skipped {
		notes = append(notes, fmt.Sprintf("%s left out: %s", s.Path, s.Why))
	}
	if extra := t.Worker.SkippedCount - len(t.Worker.Skipped); extra > 0 {
		notes = append(notes, fmt.Sprintf("%d more output files left out", extra))
	}
	if f.overflow {
		notes = append(notes, "the output files passed the total size budget; some are left out")
	}
	fs, more := readArchive(f.archive.Bytes(), lim)
	return t, fs, append(notes, more...)
}

// OutputFile is a file the code left under /mnt/outputs.
type OutputFile struct {
	// Path is relative to /mnt/outputs.
	Path string
	Data []byte
}

// outputLimits bound what comes back from /mnt/outputs.
type outputLimits struct {
	files     int
	fileBytes int
	total     int
}

// readArchive reads the worker's tar stream, which hostile code may have
// shaped: only regular files with clean relative names, within the limits.
func readArchive(b []byte, lim outputLimits) (files []OutputFile, notes []string) {
	tr := tar.NewReader(bytes.NewReader(b))
	total, left := 0, 0
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			notes = append(notes, "the output files' archive was cut short; files may be missing")
			break
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		switch {
		case h.Typeflag != tar.TypeReg:
			continue
		case name == "." || strings.HasPrefix(name, "/") || name == ".." || strings.HasPrefix(name, "../") || strings.ContainsAny(name, "\x00\\") || seen[name]:
			notes = append(notes, fmt.Sprintf("an output file with an unusable name (%q) was left out", name))
			continue
		case len(files) >= lim.files:
			left++
			continue
		case h.Size > int64(lim.fileBytes):
			notes = append(notes, fmt.Sprintf("%s left out: %d bytes, over the %d-byte limit per file", name, h.Size, lim.fileBytes))
			continue
		case total+int(h.Size) > lim.total:
			notes = append(notes, fmt.Sprintf("%s left out: over the %d-byte limit for all output files", name, lim.total))
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, h.Size))
		if err != nil || int64(len(data)) != h.Size {
			notes = append(notes, fmt.Sprintf("%s left out: cut short", name))
			continue
		}
		seen[name] = true
		total += len(data)
		files = append(files, OutputFile{Path: name, Data: data})
	}
	if left > 0 {
		notes = append(notes, fmt.Sprintf("%d output files left out: at most %d come back", left, lim.files))
	}
	return files, notes
}
