package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// recordingSink keeps what a frameParser hands it.
type recordingSink struct {
	readies int
	out     bytes.Buffer
	err     bytes.Buffer
	files   map[string]string
	reports []*report
}

func (r *recordingSink) ready() { r.readies++ }
func (r *recordingSink) stream(typ byte, p []byte) {
	if typ == frameStdout {
		r.out.Write(p)
	} else {
		r.err.Write(p)
	}
}
func (r *recordingSink) file(name string, data []byte) {
	if r.files == nil {
		r.files = map[string]string{}
	}
	r.files[name] = string(data)
}
func (r *recordingSink) done(rep *report) { r.reports = append(r.reports, rep) }

func fileFrame(name, data string) []byte {
	p := binary.BigEndian.AppendUint16(nil, uint16(len(name)))
	return appendFrame(nil, frameFile, append(append(p, name...), data...))
}

// TestFrameParserOneByteWrites: a runner's whole call, written a byte at a
// time, arrives whole: headers, streams, files and the report.
func TestFrameParserOneByteWrites(t *testing.T) {
	var b []byte
	b = appendFrame(b, frameReady, nil)
	b = appendFrame(b, frameStdout, []byte("out\x00put\n"))
	b = appendFrame(b, frameStderr, []byte("Traceback\n"))
	b = appendFrame(b, frameStdout, []byte("more\n"))
	b = append(b, fileFrame("charts/figure_1.png", "\x89PNG")...)
	b = appendFrame(b, frameDone, []byte(`{"seq": 1, "exit": 3, "ran": 0.5, "skipped": [], "skipped_count": 0}`))
	var sink recordingSink
	p := newFrameParser(&sink, 1<<20)
	if _, err := io.Copy(p, iotest.OneByteReader(bytes.NewReader(b))); err != nil || p.Err() != nil {
		t.Fatalf("copy: %v, parser: %v", err, p.Err())
	}
	if sink.readies != 1 || sink.out.String() != "out\x00put\nmore\n" || sink.err.String() != "Traceback\n" {
		t.Errorf("ready %d, stdout %q, stderr %q", sink.readies, sink.out.String(), sink.err.String())
	}
	if sink.files["charts/figure_1.png"] != "\x89PNG" {
		t.Errorf("files %q", sink.files)
	}
	if len(sink.reports) != 1 || sink.reports[0].Seq != 1 || *sink.reports[0].Exit != 3 {
		t.Errorf("reports %+v", sink.reports)
	}
}

func TestFrameParserRefuses(t *testing.T) {
	big := make([]byte, 4)
	binary.BigEndian.PutUint32(big, maxStreamFrame+1)
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"unknown type", appendFrame(nil, 'Z', []byte("x")), "unknown frame type"},
		{"an oversized stream frame", append([]byte{frameStdout}, big...), "at most"},
		{"an oversized report", append([]byte{frameDone, 0, 2, 0, 0}, make([]byte, 70000)...), "at most"},
		{"a second ready", appendFrame(appendFrame(nil, frameReady, nil), frameReady, nil), "second ready"},
		{"a file without a name", appendFrame(nil, frameFile, []byte{0}), "without a name"},
		{"a file name past the frame", appendFrame(nil, frameFile, []byte{0, 9, 'a'}), "name of 9 bytes"},
		{"a report that is not JSON", appendFrame(nil, frameDone, []byte("[1]")), "malformed report"},
		{"an exit status out of range", appendFrame(nil, frameDone, []byte(`{"seq": 1, "exit": 99999999}`)), "exit status"},
		{"an unknown field", appendFrame(nil, frameDone, []byte(`{"seq": 1, "exit": 0, "archive": "zz"}`)), "malformed report"},
		{"neither exit nor signal", appendFrame(nil, frameDone, []byte(`{"seq": 1}`)), "signal"},
		{"a negative count", appendFrame(nil, frameDone, []byte(`{"seq": 1, "exit": 0, "left": -1}`)), "counts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sink recordingSink
			p := newFrameParser(&sink, 1<<20)
			n, err := p.Write(tt.in)
			if n != len(tt.in) || err != nil {
				t.Errorf("Write = %d, %v; want every byte taken and no error", n, err)
			}
			if !errors.Is(p.Err(), errProtocol) || !strings.Contains(p.Err().Error(), tt.want) {
				t.Errorf("Err() = %v; want a protocol error saying %q", p.Err(), tt.want)
			}
			// After an error the parser reads nothing more.
			p.Write(appendFrame(nil, frameStdout, []byte("after")))
			if strings.Contains(sink.out.String(), "after") {
				t.Error("the parser went on after an error")
			}
		})
	}
}

func TestCleanOutputName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"figure_1.png", true},
		{"a/b/c.csv", true},
		{"données/été.txt", true},
		{"", false},
		{"/etc/passwd", false},
		{"../x", false},
		{"a/../../x", false},
		{"a//b", false},
		{"./a", false},
		{"a\nb", false},
		{"a\\b", false},
		{"\xff", false},
		{strings.Repeat("a", maxOutputPath+1), false},
	}
	for _, tt := range tests {
		if err := cleanOutputName(tt.name); (err == nil) != tt.ok {
			t.Errorf("cleanOutputName(%q) = %v; want ok %v", tt.name, err, tt.ok)
		}
	}
}

// FuzzFrameParser feeds the parser anything, in pieces of any size: it
// never panics, never holds more than a file frame's bound, and what it
// accepts is within the report's bounds.
func FuzzFrameParser(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, frameReady, nil), frameDone, []byte(`{"seq": 1, "exit": 0}`)), uint8(1))
	f.Add(append(appendFrame(nil, frameStdout, []byte("x")), fileFrame("a.txt", "b")...), uint8(3))
	f.Add([]byte{frameDone, 0, 0, 0, 2, '{', '}'}, uint8(2))
	f.Add(appendFrame(nil, frameDone, []byte(`{"seq": 1, "exit": 0, "skipped": [{"path": "x", "why": "y"}], "oom_kills": 2}`)), uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		var sink recordingSink
		p := newFrameParser(&sink, 1<<16)
		step := int(chunk%64) + 1
		for len(in) > 0 {
			k := min(step, len(in))
			if n, err := p.Write(in[:k]); n != k || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			in = in[k:]
			if cap(p.buf) > p.maxFile+maxDoneFrame {
				t.Fatalf("the parser holds %d bytes", cap(p.buf))
			}
		}
		if p.Err() != nil && !errors.Is(p.Err(), errProtocol) {
			t.Fatalf("an error that is not a protocol error: %v", p.Err())
		}
		for _, r := range sink.reports {
			if r.Exit != nil && (*r.Exit < 0 || *r.Exit > 255) || r.Signal < 0 || r.Signal > 64 || len(r.Skipped) > 100 {
				t.Fatalf("an out-of-range report was accepted: %+v", r)
			}
		}
		if sink.readies > 1 {
			t.Fatalf("%d ready frames accepted", sink.readies)
		}
	})
}
