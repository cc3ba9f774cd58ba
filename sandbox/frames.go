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

// demux reads the supervisor's two streams. On stdout: a handshake line
// with the container's nonce, then per call the code's stdout, the end
// marker, a JSON trailer line and the trailer's count of archive bytes (the
// output files, as tar). On stderr: per call the code's stderr, then the
// same end marker. Only the supervisor knows the nonce, so the code cannot
// end its output early. A marker may be split across writes. Each call's
// output goes to its own [callOut]; a finished call is sent on done.
type demux struct {
	mu         sync.Mutex
	marker     []byte // "\x00PYBOX-END <nonce>\n"
	ready      chan struct{}
	readyOnce  sync.Once
	archiveMax int
	newCall    func() *callOut
	cur        *callOut
	done       chan *callOut

	// stdout's state
	state int
	line  []byte
	held  []byte
	need  int // archive bytes still to come
	eheld []byte
	// early holds stderr that arrived before stdout's handshake: the
	// engine copies the two streams apart, so stderr can overtake it.
	early  []byte
	queued []*callOut // calls whose stdout ended before their stderr did
}

// callOut is one call's output.
type callOut struct {
	stdout, stderr *capWriter
	trailer        *trailer
	archive        bytes.Buffer
	overflow       bool
	stdoutDone     bool
	stderrDone     bool
}

const (
	frameHandshake = iota
	frameStdout
	frameTrailer
	frameArchive
)

// maxFrameLine bounds the handshake and the trailer lines.
const maxFrameLine = 64 << 10

// maxEarly bounds the stderr held before the handshake.
const maxEarly = 1 << 20

// trailer is what the supervisor says at the end of a call.
type trailer struct {
	ExitCode    *int `json:"exit_code"`
	Archive     int  `json:"archive"`
	SessionOver bool `json:"session_over"`
	// OOMKills counts the memory cgroup's OOM kills during the call, where
	// the runner can read them (not under gVisor).
	OOMKills *int `json:"oom_kills"`
	Worker   struct {
		Skipped []struct {
			Path string `json:"path"`
			Why  string `json:"why"`
		} `json:"skipped"`
		SkippedCount int  `json:"skipped_count"`
		Malformed    bool `json:"malformed"`
		WorkerExited bool `json:"worker_exited"`
	} `json:"worker"`
}

// memoryKilled reports whether the code's own process died by SIGKILL
// while the kernel killed for memory: a child killed for memory while the
// code went on is the code's business, and a SIGKILL the code sent itself
// is no OOM kill.
func (t *trailer) memoryKilled() bool {
	return t != nil && t.OOMKills != nil && *t.OOMKills > 0 && t.ExitCode != nil && *t.ExitCode == ExitKilled
}

func newDemux(archiveMax int, newCall func() *callOut) *demux {
	d := &demux{archiveMax: archiveMax, newCall: newCall, ready: make(chan struct{}), done: make(chan *callOut, 16)}
	d.cur = newCall()
	return d
}

// Stdout and Stderr are the writers for the container's two streams.
func (d *demux) Stdout() io.Writer { return writerFunc(d.writeStdout) }
func (d *demux) Stderr() io.Writer { return writerFunc(d.writeStderr) }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// current returns the oldest call not yet delivered: one whose stdout
// ended but whose stderr did not, or the call being written now.
func (d *demux) current() *callOut {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queued) > 0 {
		return d.queued[0]
	}
	return d.cur
}

func (d *demux) writeStdout(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		switch d.state {
		case frameHandshake, frameTrailer:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				d.line = append(d.line, p[:min(len(p), maxFrameLine-len(d.line))]...)
				return n, nil
			}
			d.line = append(d.line, p[:min(i, maxFrameLine-len(d.line))]...)
			p = p[i+1:]
			d.endLine()
		case frameStdout:
			var found bool
			p, found = scanMarker(p, d.marker, &d.held, d.cur.stdout)
			if found {
				d.state = frameTrailer
			}
		case frameArchive:
			k := min(d.need, len(p))
			if room := d.archiveMax - d.cur.archive.Len(); room > 0 {
				d.cur.archive.Write(p[:min(room, k)])
			}
			if d.cur.archive.Len() >= d.archiveMax && k > 0 {
				d.cur.overflow = true
			}
			d.need -= k
			p = p[k:]
			if d.need == 0 {
				d.stdoutEnded()
			}
		}
	}
	return n, nil
}

func (d *demux) endLine() {
	line := string(d.line)
	d.line = d.line[:0]
	switch d.state {
	case frameHandshake:
		nonce, ok := strings.CutPrefix(line, "PYBOX-READY ")
		if !ok || len(nonce) != 32 {
			// Not the supervisor's handshake: everything is the code's.
			d.cur.stdout.Write([]byte(line + "\n"))
		} else {
			d.marker = []byte("\x00PYBOX-END " + nonce + "\n")
		}
		d.state = frameStdout
		d.readyOnce.Do(func() { close(d.ready) })
		if len(d.early) > 0 {
			early := d.early
			d.early = nil
			d.stderrLocked(early)
		}
	case frameTrailer:
		t := &trailer{}
		if err := json.Unmarshal([]byte(line), t); err != nil {
			t.Worker.Malformed = true
		}
		d.cur.trailer = t
		d.need = max(t.Archive, 0)
		d.state = frameArchive
		if d.need == 0 {
			d.stdoutEnded()
		}
	}
}

// stdoutEnded closes the current call's stdout; the call is done once its
// stderr has ended too.
func (d *demux) stdoutEnded() {
	d.state = frameStdout
	d.cur.stdoutDone = true
	d.queued = append(d.queued, d.cur)
	d.cur = d.newCall()
	d.flush()
}

func (d *demux) writeStderr(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(p)
	if d.state == frameHandshake {
		if len(d.early) < maxEarly {
			d.early = append(d.early, p[:min(len(p), maxEarly-len(d.early))]...)
		}
		return n, nil
	}
	d.stderrLocked(p)
	return n, nil
}

// stderrLocked routes stderr to its call; d.mu is held.
func (d *demux) stderrLocked(p []byte) {
	for len(p) > 0 {
		// stderr belongs to the oldest call whose stderr has not ended.
		target := d.cur
		if len(d.queued) > 0 {
			target = d.queued[0]
		}
		var found bool
		p, found = scanMarker(p, d.marker, &d.eheld, target.stderr)
		if found {
			target.stderrDone = true
			if target == d.cur {
				// stderr ended first: the call waits for its stdout.
				continue
			}
			d.flush()
		}
	}
}

// flush sends the calls whose both streams have ended.
func (d *demux) flush() {
	for len(d.queued) > 0 && d.queued[0].stderrDone {
		select {
		case d.done <- d.queued[0]:
		default: // nobody waits for it (a timed-out call); drop it
		}
		d.queued = d.queued[1:]
	}
}

// scanMarker copies p to out up to the marker, holding back a possible
// start of it, and returns what follows the marker and whether it was
// found. With no marker known, all of p goes to out.
func scanMarker(p, marker []byte, held *[]byte, out io.Writer) (rest []byte, found bool) {
	if marker == nil {
		out.Write(p)
		return nil, false
	}
	if len(*held) > 0 {
		need := len(marker) - len(*held)
		k := min(need, len(p))
		if !bytes.Equal(marker[len(*held):len(*held)+k], p[:k]) {
			out.Write((*held)[:1])
			r := append(append([]byte(nil), (*held)[1:]...), p...)
			*held = (*held)[:0]
			return r, false
		}
		*held = append(*held, p[:k]...)
		p = p[k:]
		if len(*held) == len(marker) {
			*held = (*held)[:0]
			return p, true
		}
		return p, false
	}
	i := bytes.IndexByte(p, 0)
	if i < 0 {
		out.Write(p)
		return nil, false
	}
	out.Write(p[:i])
	p = p[i:]
	k := min(len(marker), len(p))
	if !bytes.Equal(marker[:k], p[:k]) {
		out.Write(p[:1])
		return p[1:], false
	}
	if k < len(marker) {
		*held = append((*held)[:0], p...)
		return nil, false
	}
	return p[k:], true
}

// release gives held-back bytes to the current call at the end of the
// streams.
func (d *demux) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.early) > 0 {
		// No handshake ever came: it is all the code's.
		d.cur.stderr.Write(d.early)
		d.early = nil
	}
	if len(d.held) > 0 {
		d.cur.stdout.Write(d.held)
		d.held = nil
	}
	if len(d.eheld) > 0 {
		d.cur.stderr.Write(d.eheld)
		d.eheld = nil
	}
}

// files reports the call's output files, checked against the limits, and
// notes on what was left out.
func (c *callOut) files(lim outputLimits) (files []OutputFile, notes []string) {
	t := c.trailer
	if t == nil {
		return nil, nil
	}
	if t.Worker.Malformed {
		notes = append(notes, "the sandbox's report on output files was malformed; files may be missing")
	}
	for _, s := range t.Worker.Skipped {
		notes = append(notes, fmt.Sprintf("%s left out: %s", s.Path, s.Why))
	}
	if extra := t.Worker.SkippedCount - len(t.Worker.Skipped); extra > 0 {
		notes = append(notes, fmt.Sprintf("%d more output files left out", extra))
	}
	if c.overflow {
		notes = append(notes, "the output files passed the total size budget; some are left out")
	}
	fs, more := readArchive(c.archive.Bytes(), lim)
	return fs, append(notes, more...)
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
