package sandbox

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestDemuxStderrBeforeHandshake: the engine copies stdout and stderr
// apart, so stderr may arrive before the handshake; it still lands in its
// call and the call completes. One-byte writes split every marker.
func TestDemuxStderrBeforeHandshake(t *testing.T) {
	nonce := strings.Repeat("ab", 16)
	end := "\x00PYBOX-END " + nonce + "\n"
	d := newDemux(1<<20, func() *callOut { return &callOut{stdout: newCapWriter(1<<16, nil), stderr: newCapWriter(1<<16, nil)} })
	io.Copy(d.Stderr(), iotest.OneByteReader(strings.NewReader("  File \"main.py\", line 2\nSyntaxError: invalid syntax\n"+end)))
	io.Copy(d.Stdout(), iotest.OneByteReader(strings.NewReader("PYBOX-READY "+nonce+"\nout\x00put\n"+end+`{"exit_code": 1, "archive": 0}`+"\n")))
	select {
	case c := <-d.done:
		out, _ := c.stdout.Text()
		errText, _ := c.stderr.Text()
		if out != "out\x00put\n" || !strings.Contains(errText, "SyntaxError") || strings.Contains(errText, "PYBOX") {
			t.Errorf("stdout %q, stderr %q", out, errText)
		}
		if c.trailer == nil || *c.trailer.ExitCode != 1 {
			t.Errorf("trailer %+v", c.trailer)
		}
	default:
		t.Fatal("the call was not delivered")
	}
}
