package sandbox

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// capWriter keeps the first head bytes and the last tail bytes written to
// it and counts the rest, so a program can print without end while the
// server's memory stays bounded. The end of a stream matters most (a
// traceback ends there), so both ends are kept. It is safe for concurrent
// use.
type capWriter struct {
	mu      sync.Mutex
	headCap int
	tailCap int
	head    []byte
	tail    []byte // the last bytes, at most 2*tailCap before compaction
	total   int64
}

// newCapWriter returns a writer keeping limit bytes in all: half from the
// start of the stream and half from its end.
func newCapWriter(limit int) *capWriter {
	if limit < 2 {
		limit = 2
	}
	h := limit / 2
	return &capWriter{headCap: h, tailCap: limit - h}
}

// Write never fails, so the copy that feeds it never stops early.
func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	w.total += int64(n)
	if room := w.headCap - len(w.head); room > 0 {
		k := min(room, len(p))
		w.head = append(w.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if len(p) >= w.tailCap {
		w.tail = append(w.tail[:0], p[len(p)-w.tailCap:]...)
		return n, nil
	}
	w.tail = append(w.tail, p...)
	if len(w.tail) > 2*w.tailCap {
		keep := w.tail[len(w.tail)-w.tailCap:]
		w.tail = append(w.tail[:0], keep...)
	}
	return n, nil
}

// Total returns the number of bytes written so far.
func (w *capWriter) Total() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// Text returns what was kept as valid UTF-8: the whole stream when it fit,
// otherwise head and tail joined by a marker that says how much is missing.
// A character cut at either edge of the gap is dropped, not mangled.
func (w *capWriter) Text() (text string, truncated bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tail := w.tail
	if len(tail) > w.tailCap {
		tail = tail[len(tail)-w.tailCap:]
	}
	kept := int64(len(w.head) + len(tail))
	if kept == w.total {
		return validUTF8(string(w.head) + string(tail)), false
	}
	head := trimIncompleteEnd(w.head)
	tail = trimIncompleteStart(tail)
	omitted := w.total - int64(len(head)) - int64(len(tail))
	marker := fmt.Sprintf("\n[... pybox: %d bytes omitted; the first %d and last %d bytes are shown ...]\n",
		omitted, len(head), len(tail))
	return validUTF8(string(head)) + marker + validUTF8(string(tail)), true
}

// validUTF8 replaces each invalid byte sequence with U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// trimIncompleteEnd drops a multi-byte character cut short at the end of b.
func trimIncompleteEnd(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return b // ASCII: nothing cut
		}
		if utf8.RuneStart(c) {
			if r, size := utf8.DecodeRune(b[len(b)-i:]); r == utf8.RuneError && size <= 1 && i < utf8.UTFMax {
				if !utf8.FullRune(b[len(b)-i:]) {
					return b[:len(b)-i]
				}
			}
			return b
		}
	}
	return b
}

// trimIncompleteStart drops continuation bytes at the start of b, left over
// from a character whose first bytes were cut away.
func trimIncompleteStart(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b
}
