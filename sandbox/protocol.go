package sandbox

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The runner's protocol (see runner.py): frames of a type byte, a
// big-endian uint32 length and that many bytes, in both directions over the
// container's attached streams.
const (
	// Server to runner, on stdin.
	frameConfig    = 'A'
	frameRun       = 'R'
	frameInterrupt = 'I'
	frameStop      = 'K'

	// Runner to server, on stdout.
	frameReady  = 'Y'
	frameStdout = 'O'
	frameStderr = 'E'
	frameFile   = 'F'
	frameDone   = 'D'
)

const frameHeader = 5

// Bounds on what the runner may send. Anything past them is a protocol
// error: the runner never sends it, so whatever did is not the runner.
const (
	maxStreamFrame = 4 << 20
	maxReadyFrame  = 1 << 10
	maxDoneFrame   = 64 << 10
	maxOutputPath  = 1024
)

// errProtocol means the sandbox's output broke the runner's protocol.
var errProtocol = errors.New("the sandbox's output broke pybox's protocol")

// appendFrame appends one frame to b.
func appendFrame(b []byte, typ byte, payload []byte) []byte {
	b = append(b, typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(len(payload)))
	return append(b, payload...)
}

// runnerConfig is the first frame the server sends.
type runnerConfig struct {
	Mode      string   `json:"mode"` // "once" or "session"
	PreImport []string `json:"preimport,omitempty"`
	Flush     float64  `json:"flush"` // seconds between writes of buffered output
	// Expire is the seconds the runner lives without a call (a pooled or
	// cold sandbox), or at all (a session's): then it stops everything
	// and exits, whether or not a server is left to ask it.
	Expire float64      `json:"expire"`
	Limits runnerLimits `json:"limits"`
	// Seal, when set, is the hex key the runner seals its stdout with
	// (see sealedStream).
	Seal string `json:"seal,omitempty"`
}

type runnerLimits struct {
	Files        int `json:"files"`
	FileBytes    int `json:"file_bytes"`
	TotalBytes   int `json:"total_bytes"`
	RequestBytes int `json:"request_bytes"`
	// Procs, when set, bounds the processes and threads of the sandbox's
	// uid (RLIMIT_NPROC), for engines with no pids limit of their own.
	Procs int64 `json:"procs,omitempty"`
}

// encodeRun is the frame that starts call seq. In a one-call sandbox the
// runner gives up expire after it.
func encodeRun(seq int, req Request, expire time.Duration) ([]byte, error) {
	type file struct {
		Path string `json:"path"`
		Size int    `json:"size"`
	}
	files := make([]file, 0, len(req.Files))
	size := len(req.Code)
	for _, f := range req.Files {
		files = append(files, file{f.Path, len(f.Data)})
		size += len(f.Data)
	}
	head, err := json.Marshal(struct {
		Seq    int     `json:"seq"`
		Code   int     `json:"code"`
		Files  []file  `json:"files"`
		Expire float64 `json:"expire"`
	}{seq, len(req.Code), files, expire.Seconds()})
	if err != nil {
		return nil, err
	}
	payload := make([]byte, 0, len(head)+1+size)
	payload = append(append(payload, head...), '\n')
	payload = append(payload, req.Code...)
	for _, f := range req.Files {
		payload = append(payload, f.Data...)
	}
	return appendFrame(make([]byte, 0, frameHeader+len(payload)), frameRun, payload), nil
}

// report is the runner's account of a call's end, checked by [parseReport].
type report struct {
	Seq int `json:"seq"`
	// Exit is the code's exit status; Signal the signal that ended its
	// process instead (0 when it exited).
	Exit   *int    `json:"exit"`
	Signal int     `json:"signal"`
	Ran    float64 `json:"ran"` // seconds the code ran
	// Setup is the runner's seconds from the call's frame to the code's
	// start (input files written); Finish, from the code's end to this
	// report (leftovers stopped, output drained, output files sent). For
	// the latency breakdown only: nothing is decided on them.
	Setup  float64 `json:"setup"`
	Finish float64 `json:"finish"`
	// OOMKills counts the memory cgroup's OOM kills during the call, where
	// the runner can read them (not under gVisor).
	OOMKills *int `json:"oom_kills"`
	// Left counts the processes the code left running (a one-call
	// sandbox stops them); Background and NewBackground count those still
	// running in a session, and those this call started.
	Left          int `json:"left"`
	Background    int `json:"background"`
	NewBackground int `json:"new_background"`
	// Stopped: the call was stopped by the server (its timeout, a cancel).
	Stopped bool `json:"stopped"`
	// Restarted says why a session's Python process was restarted during
	// the call: "exited", "stopped" or "malformed"; RestartedBefore, why
	// it was restarted between the last call and this one.
	Restarted       string `json:"restarted"`
	RestartedBefore string `json:"restarted_before"`
	// InputError: the input files could not be written; the code did not run.
	InputError   string        `json:"input_error"`
	Skipped      []skippedFile `json:"skipped"`
	SkippedCount int           `json:"skipped_count"`
}

type skippedFile struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// parseReport reads a done frame, refusing anything the runner would not
// send: unknown fields, values out of range, overlong strings.
func parseReport(b []byte) (*report, error) {
	var r report
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: a malformed report (%v)", errProtocol, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the report", errProtocol)
	}
	bad := func(what string) (*report, error) {
		return nil, fmt.Errorf("%w: the report's %s is out of range", errProtocol, what)
	}
	switch {
	case r.Seq < 0:
		return bad("seq")
	case r.Exit != nil && (*r.Exit < 0 || *r.Exit > 255):
		return bad("exit status")
	case r.Signal < 0 || r.Signal > 64, r.Exit == nil && r.Signal == 0 && r.InputError == "" && r.Restarted != "malformed":
		return bad("signal")
	case r.Ran < 0 || r.Ran > 1e7 || r.Setup < 0 || r.Setup > 1e7 || r.Finish < 0 || r.Finish > 1e7:
		return bad("run time")
	case r.OOMKills != nil && *r.OOMKills < 0:
		return bad("OOM kill count")
	case r.Left < 0 || r.Background < 0 || r.NewBackground < 0 || r.SkippedCount < 0 || len(r.Skipped) > 100:
		return bad("counts")
	case len(r.Restarted) > 64 || len(r.RestartedBefore) > 256 || len(r.InputError) > 4096:
		return bad("strings")
	}
	for _, s := range r.Skipped {
		if len(s.Path) > 4*maxOutputPath || len(s.Why) > 512 {
			return bad("skipped files")
		}
	}
	return &r, nil
}

// frameSink receives what a frameParser reads.
type frameSink interface {
	ready()
	stream(typ byte, p []byte) // a piece of a stdout or stderr frame
	file(name string, data []byte)
	done(r *report)
}

// frameParser reads the runner's stdout, written in pieces of any size.
// It holds at most one file frame, whose size the limits bound. After an
// error it reads nothing more: Err says what was wrong.
type frameParser struct {
	sink     frameSink
	maxFile  int // largest file frame
	head     [frameHeader]byte
	nhead    int
	typ      byte
	left     int    // payload bytes still to come
	buf      []byte // a whole frame's payload, but for stream frames
	err      error
	gotReady bool
}

func newFrameParser(sink frameSink, maxFileBytes int) *frameParser {
	return &frameParser{sink: sink, maxFile: maxFileBytes + 2 + maxOutputPath}
}

// Err is the protocol error that stopped the parser, or nil.
func (p *frameParser) Err() error { return p.err }

// Write never fails, so the copy that feeds it reads the stream to its end
// (a broken protocol is reported by Err).
func (p *frameParser) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 && p.err == nil {
		if p.nhead < frameHeader {
			k := copy(p.head[p.nhead:], b)
			p.nhead += k
			b = b[k:]
			if p.nhead == frameHeader {
				p.begin()
			}
			continue
		}
		k := min(p.left, len(b))
		if p.typ == frameStdout || p.typ == frameStderr {
			p.sink.stream(p.typ, b[:k])
		} else {
			p.buf = append(p.buf, b[:k]...)
		}
		p.left -= k
		b = b[k:]
		if p.left == 0 {
			p.end()
		}
	}
	return n, nil
}

func (p *frameParser) fail(format string, a ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: "+format, append([]any{errProtocol}, a...)...)
	}
}

func (p *frameParser) begin() {
	p.typ = p.head[0]
	p.left = int(binary.BigEndian.Uint32(p.head[1:]))
	limit := 0
	switch p.typ {
	case frameStdout, frameStderr:
		limit = maxStreamFrame
	case frameReady:
		limit = maxReadyFrame
	case frameDone:
		limit = maxDoneFrame
	case frameFile:
		limit = p.maxFile
	default:
		p.fail("unknown frame type %#x", p.typ)
		return
	}
	if p.left > limit {
		p.fail("a frame of %d bytes of type %q; at most %d", p.left, p.typ, limit)
		return
	}
	p.buf = p.buf[:0]
	if p.left == 0 {
		p.end()
	}
}

func (p *frameParser) end() {
	p.nhead = 0
	switch p.typ {
	case frameReady:
		if p.gotReady {
			p.fail("a second ready frame")
			return
		}
		p.gotReady = true
		p.sink.ready()
	case frameFile:
		if len(p.buf) < 2 {
			p.fail("a file frame without a name")
			return
		}
		n := int(binary.BigEndian.Uint16(p.buf))
		if n == 0 || n > maxOutputPath || 2+n > len(p.buf) {
			p.fail("a file frame's name of %d bytes", n)
			return
		}
		name := string(p.buf[2 : 2+n])
		data := make([]byte, len(p.buf)-2-n)
		copy(data, p.buf[2+n:])
		p.sink.file(name, data)
	case frameDone:
		r, err := parseReport(p.buf)
		if err != nil {
			p.err = err
			return
		}
		p.sink.done(r)
	}
	if cap(p.buf) > 1<<20 {
		p.buf = nil // a file's buffer is not kept between frames
	}
}

// cleanOutputName checks an output file's name as the runner sends it: a
// clean relative path of printable UTF-8.
func cleanOutputName(name string) error {
	clean := path.Clean(name)
	switch {
	case name == "" || len(name) > maxOutputPath:
		return errors.New("an empty or overlong name")
	case clean != name || strings.HasPrefix(name, "/") || name == ".." || strings.HasPrefix(name, "../"):
		return errors.New("not a clean relative path")
	case !utf8.ValidString(name):
		return errors.New("not UTF-8")
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || r == '\\' {
			return errors.New("a character that is not printable, or a backslash")
		}
	}
	return nil
}

// writeFrame writes one frame to w.
func writeFrame(w io.Writer, typ byte, payload []byte) error {
	_, err := w.Write(appendFrame(make([]byte, 0, frameHeader+len(payload)), typ, payload))
	return err
}
