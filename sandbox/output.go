package sandbox

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// capWriter keeps the first bytes and the last bytes written to it and
// counts the rest, so a program can print without end while the server's
// memory stays bounded. The end of a stream matters most (a traceback ends
// there), so both ends are kept.
//
// With a margin, each end is kept with redactMargin past the part shown,
// so that it is redacted whole before it is cut to size: a secret that
// crosses the cut is replaced whole, and no part of it is shown at the
// marker. It is safe for concurrent use.
type capWriter struct {
	mu       sync.Mutex
	showHead int // bytes shown from the start
	showTail int // bytes shown from the end
	headCap  int // showHead plus the margin
	tailCap  int // showTail plus the margin
	head     []byte
	tail     []byte // the last bytes, at most 2*tailCap before compaction
	total    int64
}

// redactMargin is the context kept beyond what is shown so that a secret
// crossing the cut is seen whole by the redactor. Secrets are shorter:
// the longest, a 4096-bit RSA private key, is about 3.3 KB.
const redactMargin = 16 << 10

// newCapWriter returns a writer showing limit bytes in all, half from the
// start of the stream and half from its end, keeping a margin past them
// for redaction when margin is true.
func newCapWriter(limit int, margin bool) *capWriter {
	if limit < 2 {
		limit = 2
	}
	h := limit / 2
	w := &capWriter{showHead: h, showTail: limit - h}
	w.headCap, w.tailCap = w.showHead, w.showTail
	if margin {
		w.headCap += redactMargin
		w.tailCap += redactMargin
	}
	return w
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

// Text returns what was kept as valid UTF-8, passed through redact when
// it is not nil: the whole stream when it fits, otherwise head and tail
// joined by a marker that says how much is missing. It fails when redact
// does.
func (w *capWriter) Text(redact func(string) (string, error)) (text string, truncated bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	clean := func(s string) string {
		s = validUTF8(s)
		if redact != nil && err == nil {
			s, err = redact(s)
		}
		return s
	}
	tail := w.tail
	if len(tail) > w.tailCap {
		tail = tail[len(tail)-w.tailCap:]
	}
	var head, end string
	if int64(len(w.head)+len(tail)) == w.total {
		// All of it is here: redact it whole, then cut if it is too long.
		all := clean(string(w.head) + string(tail))
		if err != nil {
			return "", false, err
		}
		if len(all) <= w.showHead+w.showTail {
			return all, false, nil
		}
		head, end = all, all
	} else {
		head, end = clean(string(w.head)), clean(string(tail))
		if err != nil {
			return "", false, err
		}
	}
	head = cutHead(head, w.showHead)
	end = cutTail(end, w.showTail)
	omitted := w.total - int64(len(head)) - int64(len(end))
	marker := fmt.Sprintf("\n[... pybox: output truncated, %d bytes omitted; the first %d and last %d bytes are shown ...]\n",
		max(omitted, 0), len(head), len(end))
	return validUTF8(head + marker + end), true, nil
}

const redactedPrefix = "[REDACTED:"

// cutHead returns at most n bytes from the start of s, never cutting a
// character or a redaction marker in two.
func cutHead(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	if i := strings.LastIndex(s[max(0, cut-96):cut], redactedPrefix); i >= 0 {
		i += max(0, cut-96)
		if j := strings.IndexByte(s[i:], ']'); j < 0 || i+j >= cut {
			cut = i
		}
	}
	return string(trimIncompleteEnd([]byte(s[:cut])))
}

// cutTail returns at most n bytes from the end of s, never cutting a
// character or a redaction marker in two.
func cutTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	if i := strings.LastIndex(s[max(0, cut-96):cut], redactedPrefix); i >= 0 {
		i += max(0, cut-96)
		if j := strings.IndexByte(s[i:], ']'); j >= 0 && i+j >= cut {
			cut = i + j + 1
		}
	}
	return string(trimIncompleteStart([]byte(s[cut:])))
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
	i := 0
	for i < utf8.UTFMax-1 && i < len(b) && !utf8.RuneStart(b[i]) {
		i++
	}
	return b[i:]
}
