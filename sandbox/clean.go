package sandbox

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
	"time"
)

// Redactor finds secrets and replaces them. *redact.Redactor is one. It
// must be safe for concurrent use.
type Redactor interface {
	// String redacts a short message of pybox's own.
	String(s string) string
	// StringContext redacts text; it stops with ctx's error when ctx ends.
	StringContext(ctx context.Context, s string) (string, error)
	// MaskContext replaces each secret in binary data with as many '*'
	// bytes, keeping its length; it stops with ctx's error when ctx ends.
	MaskContext(ctx context.Context, s string) (string, error)
}

// The budget of a call's redaction: it runs in the call's slot, in one
// goroutine (so it costs the server at most one core, and no more CPU
// time than wall time), and ends at the call's deadline. What is not
// redacted by then is withheld. A call stopped at its timeout hands its
// output over after its deadline: its files get filesFloor and its streams
// streamFloor from then, so that what it printed and wrote comes back. The
// streams are small (twice OutputLimit and a margin) and always get
// streamFloor.
const (
	filesFloor  = 500 * time.Millisecond
	streamFloor = time.Second
)

// maxUnpacked bounds what is unpacked of one compressed output file (a zip
// such as .xlsx or .docx, or gzip) to look for secrets in; a file that
// unpacks to more is withheld.
const maxUnpacked = 256 << 20

// cleaned is a call's output as it leaves: redacted, or withheld with a
// note.
type cleaned struct {
	stdout, stderr string
	truncated      bool
	files          []OutputFile
	notes          []string
}

// clean redacts everything of a call that leaves the server: its streams,
// its output files' names and contents. The caller holds the call's slot.
func (s *Sandbox) clean(ctx context.Context, out *callOut, files []OutputFile, deadline time.Time) cleaned {
	r := s.opt.Redact
	if r == nil {
		r = noRedactor{}
	}
	var c cleaned

	sctx, cancel := context.WithDeadline(ctx, later(deadline, time.Now().Add(streamFloor)))
	stream := func(w *capWriter, name string) string {
		text, trunc, err := w.Text(func(t string) (string, error) { return r.StringContext(sctx, t) })
		c.truncated = c.truncated || trunc
		if err != nil {
			return fmt.Sprintf("[pybox: %s withheld (%d bytes): it could not be redacted in time]\n", name, w.Total())
		}
		return text
	}
	c.stdout, c.stderr = stream(out.stdout, "stdout"), stream(out.stderr, "stderr")
	cancel()

	fctx, cancel := context.WithDeadline(ctx, later(deadline, time.Now().Add(filesFloor)))
	defer cancel()
	seen := map[string]bool{}
	for _, f := range files {
		j := fileJob{in: f}
		name, err := r.StringContext(fctx, f.Path)
		if err != nil {
			c.notes = append(c.notes, fmt.Sprintf("%s withheld: there was no time left to redact it", clip(r.String(f.Path), noteNameBytes)))
			continue
		}
		j.name = unique(name, seen)
		j.run(fctx, r)
		if j.note != "" {
			c.notes = append(c.notes, j.note)
			continue
		}
		c.files = append(c.files, j.out)
	}
	return c
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// unique returns name, or name with "-2", "-3"... before its extension
// when redaction made it the same as an earlier one.
func unique(name string, seen map[string]bool) string {
	n := name
	for k := 2; seen[n]; k++ {
		ext := path.Ext(name)
		n = fmt.Sprintf("%s-%d%s", strings.TrimSuffix(name, ext), k, ext)
	}
	seen[n] = true
	return n
}

// fileJob is one output file on its way out.
type fileJob struct {
	in   OutputFile
	name string // redacted
	out  OutputFile
	note string // why it was withheld
}

func (j *fileJob) run(ctx context.Context, r Redactor) {
	kind, mime, text := classify(j.in.Path, j.in.Data)
	j.out = OutputFile{Path: j.name, MIMEType: mime}
	withheld := func(format string, a ...any) {
		j.note = fmt.Sprintf("%s (%d bytes) withheld: ", clip(j.name, noteNameBytes), len(j.in.Data)) + fmt.Sprintf(format, a...)
	}
	late := func(err error) {
		if errors.Is(err, context.DeadlineExceeded) {
			withheld("redacting it did not finish within the call's timeout; write less, or give the call a longer timeout")
		} else {
			withheld("the call ended before it was redacted")
		}
	}
	if kind == kindText {
		t, err := r.StringContext(ctx, text)
		if err != nil {
			late(err)
			return
		}
		j.out.Data, j.out.Text = []byte(t), true
		return
	}
	// Bytes: secrets starred in place, so the file keeps its layout; a
	// secret inside compressed content cannot be, and withholds the file.
	b, err := r.MaskContext(ctx, string(j.in.Data))
	if err != nil {
		late(err)
		return
	}
	found, over, err := packedSecret(ctx, r, j.in.Data, maxUnpacked)
	switch {
	case err != nil:
		late(err)
		return
	case found != "":
		withheld("its compressed content holds a secret (%s), which cannot be redacted in place", found)
		return
	case over:
		withheld("its compressed content unpacks to more than %d MiB, more than pybox searches for secrets", maxUnpacked>>20)
		return
	}
	j.out.Data = []byte(b)
}

var markerRE = regexp.MustCompile(`\[REDACTED:([A-Za-z0-9_-]+)\]`)

// packedSecret looks for secrets inside a zip (an .xlsx, .docx or .zip)
// or gzip file and returns the kind of the first found. over is true when
// the content unpacks to more than limit bytes. Other data, and archives
// that do not open, have nothing unpacked.
func packedSecret(ctx context.Context, r Redactor, data []byte, limit int) (found string, over bool, err error) {
	budget := limit
	check := func(rd io.Reader) (string, error) {
		k, n, err := scanReader(ctx, r, rd, budget)
		budget -= n
		if err == nil && budget < 0 {
			over = true
		}
		return k, err
	}
	switch {
	case bytes.HasPrefix(data, []byte("PK\x03\x04")):
		z, zerr := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if zerr != nil {
			return "", false, nil
		}
		for _, f := range z.File {
			if k, err := check(strings.NewReader(f.Name)); err != nil || k != "" {
				return k, false, err
			}
			rc, oerr := f.Open()
			if oerr != nil {
				continue
			}
			k, err := check(rc)
			rc.Close()
			if err != nil || k != "" || over {
				return k, over, err
			}
		}
	case bytes.HasPrefix(data, []byte{0x1f, 0x8b}):
		zr, zerr := gzip.NewReader(bytes.NewReader(data))
		if zerr != nil {
			return "", false, nil
		}
		defer zr.Close()
		k, err := check(zr)
		return k, over, err
	}
	return "", over, nil
}

// scanReader redacts what rd yields, in pieces of 1 MiB that overlap by
// 64 KiB (a secret is whole in one), and returns the kind of the first
// secret found and the bytes read. It reads at most limit+1 bytes; a
// reader that breaks ends the search without error.
func scanReader(ctx context.Context, r Redactor, rd io.Reader, limit int) (string, int, error) {
	const piece, overlap = 1 << 20, 64 << 10
	buf := make([]byte, 0, piece)
	read := 0
	for {
		n, rerr := io.ReadFull(io.LimitReader(rd, int64(limit+1-read)), buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		read += n
		if len(buf) > 0 {
			in := string(buf)
			out, err := r.StringContext(ctx, in)
			if err != nil {
				return "", read, err
			}
			if out != in {
				for _, m := range markerRE.FindAllStringSubmatchIndex(out, -1) {
					if !strings.Contains(in, out[m[0]:m[1]]) {
						return out[m[2]:m[3]], read, nil
					}
				}
			}
		}
		if rerr != nil || read > limit {
			return "", read, nil
		}
		keep := buf[max(0, len(buf)-overlap):]
		buf = append(buf[:0], keep...)
	}
}

// noRedactor is the redactor of a sandbox that was given none.
type noRedactor struct{}

func (noRedactor) String(s string) string { return s }
func (noRedactor) StringContext(ctx context.Context, s string) (string, error) {
	return s, ctx.Err()
}
func (noRedactor) MaskContext(ctx context.Context, s string) (string, error) {
	return s, ctx.Err()
}
