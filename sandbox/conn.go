package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// conn is the server's end of a sandbox's runner: the container's attached
// streams, read by one goroutine that hands each call's output to that
// call. It never trusts what it reads: the frames are parsed with bounds,
// output files are checked again, and a broken protocol closes the conn.
type conn struct {
	st     stream
	parser *frameParser
	lim    outputLimits
	diag   *capWriter // the runner's own stderr, for the log

	wmu sync.Mutex // one writer to the runner's stdin

	mu       sync.Mutex
	cur      *callOut // the call being served, or nil
	readyc   chan struct{}
	closed   chan struct{} // the streams ended or the protocol broke
	reader   chan struct{} // closed when the reading goroutine is done
	err      error         // why it closed
	isClosed bool
}

// callOut is one call's output, as it arrives.
type callOut struct {
	seq    int
	stdout *capWriter
	stderr *capWriter
	live   *liveOut // a copy for progress reports, or nil
	files  []OutputFile
	total  int
	seen   map[string]bool
	notes  []fileNote // files the server refused, and why
	report *report
	done   chan struct{} // closed when the report came
	// handover is when the call was handed to the runner; doneAt, when
	// its report came (both for the call's Timing).
	handover, doneAt time.Time
}

func newCallOut(seq, limit int, live *liveOut) *callOut {
	return &callOut{seq: seq, stdout: newCapWriter(limit, true), stderr: newCapWriter(limit, true), live: live, seen: map[string]bool{}, done: make(chan struct{})}
}

// diagLimit bounds the runner's own stderr kept for the log.
const diagLimit = 16 << 10

// openConn starts reading a launched sandbox's streams and sends the
// runner its configuration, which lets it begin.
func openConn(st stream, cfg runnerConfig, lim outputLimits) (*conn, error) {
	c := &conn{st: st, lim: lim, diag: newCapWriter(diagLimit, false), readyc: make(chan struct{}), closed: make(chan struct{}), reader: make(chan struct{})}
	c.parser = newFrameParser(c, lim.fileBytes)
	if s, ok := st.(sealedStream); ok {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		cfg.Seal = hex.EncodeToString(key)
		s.seal(key)
	}
	go c.read()
	b, err := json.Marshal(cfg)
	if err == nil {
		err = c.send(frameConfig, b)
	}
	if err != nil {
		c.close(err)
		return nil, err
	}
	return c, nil
}

func (c *conn) read() {
	defer close(c.reader)
	err := c.st.Demux(writerFunc(c.write), c.diag)
	if err == nil {
		err = io.EOF
	}
	c.close(err)
}

// readerDone waits, briefly, until the reading goroutine is done, so that
// a call's output is complete and no longer written to.
func (c *conn) readerDone() {
	select {
	case <-c.reader:
	case <-time.After(killGrace):
	}
}

// diagText is what the runner wrote on its own stderr.
func (c *conn) diagText() string {
	t, _, _ := c.diag.Text(nil)
	return t
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// write feeds the parser; a protocol error closes the conn at once, and
// what follows is read and dropped so the engine's copy does not stall.
func (c *conn) write(p []byte) (int, error) {
	if c.parser.Err() != nil {
		return len(p), nil
	}
	n, _ := c.parser.Write(p)
	if err := c.parser.Err(); err != nil {
		c.close(err)
	}
	return n, nil
}

// close marks the conn closed for err and closes the streams.
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.isClosed {
		c.mu.Unlock()
		return
	}
	c.isClosed, c.err = true, err
	c.mu.Unlock()
	close(c.closed)
	c.st.Close()
}

// Err says why the conn closed.
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// alive reports whether the conn is still open.
func (c *conn) alive() bool {
	select {
	case <-c.closed:
		return false
	default:
		return true
	}
}

// send writes one frame to the runner.
func (c *conn) send(typ byte, payload []byte) error {
	return c.sendRaw(appendFrame(make([]byte, 0, frameHeader+len(payload)), typ, payload))
}

func (c *conn) sendRaw(frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.st.Stdin().Write(frame)
	return err
}

// begin makes out the call the runner's output now belongs to.
func (c *conn) begin(out *callOut) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		return errors.New("a call is already running in this sandbox")
	}
	c.cur = out
	return nil
}

// The frameSink methods, called by the reading goroutine only.

func (c *conn) ready() {
	close(c.readyc)
}

func (c *conn) stream(typ byte, p []byte) {
	c.mu.Lock()
	cur := c.cur
	c.mu.Unlock()
	if cur == nil {
		return // the runner sends none between calls; nothing to keep
	}
	if typ == frameStdout {
		cur.stdout.Write(p)
	} else {
		cur.stderr.Write(p)
	}
	if cur.live != nil {
		cur.live.Write(p)
	}
}

// fileNote says why an output file did not come back. The name is as the
// code gave it: it is redacted, then cut short, before it is shown.
type fileNote struct {
	name, why string
}

// collected returns a call's report, files and the notes on the files the
// server refused, as far as they came.
func (c *conn) collected(out *callOut) (*report, []OutputFile, []fileNote) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return out.report, out.files, append([]fileNote(nil), out.notes...)
}

func (c *conn) file(name string, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.cur
	if cur == nil {
		c.parser.fail("an output file outside a call")
		return
	}
	refuse := func(format string, a ...any) {
		cur.notes = append(cur.notes, fileNote{name: name, why: fmt.Sprintf(format, a...)})
	}
	switch err := cleanOutputName(name); {
	case err != nil:
		refuse("left out: its name is unusable (%v)", err)
	case cur.seen[name]:
		refuse("came back twice; the first is kept")
	case len(cur.files) >= c.lim.files:
		refuse("left out: at most %d files come back", c.lim.files)
	case len(data) > c.lim.fileBytes:
		refuse("left out: %d bytes, over the %d-byte limit per file", len(data), c.lim.fileBytes)
	case cur.total+len(name)+len(data) > c.lim.total:
		// A name leaves too (in the result, its text and the file's URI):
		// it counts with the contents.
		refuse("left out: over the %d-byte limit for all output files, names included", c.lim.total)
	default:
		cur.seen[name] = true
		cur.total += len(name) + len(data)
		cur.files = append(cur.files, OutputFile{Path: name, Data: data})
	}
}

func (c *conn) done(r *report) {
	c.mu.Lock()
	cur := c.cur
	if cur == nil || cur.seq != r.Seq {
		c.mu.Unlock()
		c.parser.fail("a report for call %d, which is not running", r.Seq)
		return
	}
	c.cur, cur.report, cur.doneAt = nil, r, time.Now()
	c.mu.Unlock()
	close(cur.done)
}
