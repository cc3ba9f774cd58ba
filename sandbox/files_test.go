package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"image/png"
	"strings"
	"testing"
	"time"
)

func TestInputFiles(t *testing.T) {
	s := newTest(t, Options{})
	csv := "region,amount\nnorth,10.5\nsouth,20.25\neast,30\n"
	res := s.Run(context.Background(), Request{
		Code: `import pandas as pd, os, stat
df = pd.read_csv("/mnt/user-data/data/sales.csv")
print(df.amount.sum())
try:
    open("/mnt/user-data/data/sales.csv", "a").write("x")
    print("wrote the input")
except OSError as e:
    print("refused", e.errno)
print(oct(stat.S_IMODE(os.stat("/mnt/user-data/blob.bin").st_mode)))
print(open("/mnt/user-data/blob.bin", "rb").read() == bytes(range(256)))
`,
		Files: []InputFile{{Path: "data/sales.csv", Data: []byte(csv)}, {Path: "blob.bin", Data: bytesRange()}},
	})
	// Input files are read-only by their mode (0444): an accidental write
	// fails. The code runs as the uid that wrote them, so it could change
	// that mode; they are its own sandbox's files.
	want := "60.75\nrefused 13\n0o444\nTrue\n"
	if res.Stdout != want || res.ExitCode != 0 {
		t.Errorf("stdout %q (exit %d, stderr %q); want %q", res.Stdout, res.ExitCode, res.Stderr, want)
	}
}

func bytesRange() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestInputFilesRejected(t *testing.T) {
	s, err := newSandbox(Options{MaxInputBytes: 100, MaxInputFileBytes: 60}, failingParts(nil), nopLogger())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files []InputFile
		want  string
	}{
		{"dot dot", []InputFile{{Path: "../etc/passwd"}}, `"../etc/passwd": ".." is not allowed`},
		{"dot dot inside", []InputFile{{Path: "a/../../b"}}, `".." is not allowed`},
		{"absolute", []InputFile{{Path: "/etc/passwd"}}, "not absolute"},
		{"windows absolute", []InputFile{{Path: `C:\x`}}, "not absolute"},
		{"empty", []InputFile{{Path: ""}}, "empty"},
		{"duplicate", []InputFile{{Path: "a.txt"}, {Path: "a.txt"}}, "given twice"},
		{"file and folder", []InputFile{{Path: "a"}, {Path: "a/b"}}, "also given as a file"},
		{"control character", []InputFile{{Path: "a\nb"}}, "control"},
		{"too deep", []InputFile{{Path: "a/b/c/d/e/f/g/h/i"}}, "8 levels"},
		{"file too big", []InputFile{{Path: "big", Data: make([]byte, 61)}}, `files[0] "big": 61 bytes; at most 60 per file`},
		{"total too big", []InputFile{{Path: "a", Data: make([]byte, 60)}, {Path: "b", Data: make([]byte, 60)}}, `files[1] "b": the files pass 120 bytes together`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := s.Run(context.Background(), Request{Code: "print(1)", Files: tt.files})
			if res.Error != ErrInvalidInput || !strings.Contains(res.Stderr, tt.want) {
				t.Errorf("Run() = %q %q; want invalid_input saying %q", res.Error, res.Stderr, tt.want)
			}
		})
	}
}

func TestOutputFiles(t *testing.T) {
	s := newTest(t, Options{})
	big := make([]byte, 5<<20)
	rand.Read(big)
	res := s.Run(context.Background(), Request{
		Code: `import matplotlib.pyplot as plt, os
open("/mnt/user-data/in.bin", "rb")
os.makedirs("/mnt/outputs/sub", exist_ok=True)
open("/mnt/outputs/sub/copy.bin", "wb").write(open("/mnt/user-data/in.bin", "rb").read())
open("/mnt/outputs/notes.txt", "w").write("hello\n")
fig = plt.figure(figsize=(4, 3), dpi=100)
plt.plot([1, 2, 3], [2, 4, 1])
fig.savefig("/mnt/outputs/plot.png")
plt.show()
plt.figure(figsize=(2, 2), dpi=50)
plt.bar(["a", "b"], [3, 5])
print("done")
`,
		Files:   []InputFile{{Path: "in.bin", Data: big}},
		Timeout: 60 * time.Second,
	})
	if res.ExitCode != 0 || res.Stdout != "done\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if strings.Contains(res.Stderr, "non-interactive") {
		t.Errorf("plt.show() warned: %q", res.Stderr)
	}
	got := map[string][]byte{}
	for _, f := range res.Files {
		got[f.Path] = f.Data
	}
	if !bytes.Equal(got["sub/copy.bin"], big) {
		t.Errorf("the 5 MB binary did not round-trip byte-exact (%d bytes back)", len(got["sub/copy.bin"]))
	}
	if string(got["notes.txt"]) != "hello\n" {
		t.Errorf("notes.txt = %q", got["notes.txt"])
	}
	for name, size := range map[string][2]int{"plot.png": {400, 300}, "figure_1.png": {400, 300}, "figure_2.png": {100, 100}} {
		img, err := png.Decode(bytes.NewReader(got[name]))
		if err != nil {
			t.Errorf("%s: %v (files: %v)", name, err, keys(got))
			continue
		}
		if b := img.Bounds(); b.Dx() != size[0] || b.Dy() != size[1] {
			t.Errorf("%s is %dx%d; want %dx%d", name, b.Dx(), b.Dy(), size[0], size[1])
		}
	}
}

func keys(m map[string][]byte) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

// TestHostileOutputs: symlinks, floods of files, oversized and growing
// files and a forged end marker come back contained, with notes.
func TestHostileOutputs(t *testing.T) {
	s := newTest(t, Options{MaxOutputFileBytes: 1 << 20})
	tests := []struct {
		name  string
		code  string
		check func(t *testing.T, res Result)
	}{
		{"symlinks", `import os
os.symlink("/etc/passwd", "/mnt/outputs/passwd")
open("/tmp/huge", "wb").truncate(1 << 40)
os.symlink("/tmp/huge", "/mnt/outputs/huge")
os.symlink("/", "/mnt/outputs/root")
open("/mnt/outputs/real.txt", "w").write("ok")
`, func(t *testing.T, res Result) {
			if len(res.Files) != 1 || res.Files[0].Path != "real.txt" {
				t.Errorf("files %v; want real.txt alone", names(res.Files))
			}
			if !strings.Contains(res.Stderr, "passwd left out: not a regular file") {
				t.Errorf("stderr %q does not name the left-out symlink", res.Stderr)
			}
		}},
		{"10,000 tiny files", `for i in range(10000):
    open(f"/mnt/outputs/f{i:05d}.txt", "w").write(str(i))
`, func(t *testing.T, res Result) {
			if len(res.Files) != DefaultMaxOutputFiles {
				t.Errorf("%d files came back; want %d", len(res.Files), DefaultMaxOutputFiles)
			}
			if !strings.Contains(res.Stderr, "left out") {
				t.Errorf("stderr %q does not say files were left out", res.Stderr)
			}
		}},
		{"an oversized file", `open("/mnt/outputs/big.bin", "wb").write(b"x" * (3 << 20))
open("/mnt/outputs/small.txt", "w").write("fine")
`, func(t *testing.T, res Result) {
			if len(res.Files) != 1 || res.Files[0].Path != "small.txt" {
				t.Errorf("files %v; want small.txt alone", names(res.Files))
			}
			if !strings.Contains(res.Stderr, "big.bin left out") {
				t.Errorf("stderr %q does not name big.bin", res.Stderr)
			}
		}},
		{"a file that grows while collected", `import threading, time
f = open("/mnt/outputs/grow.log", "wb")
def grow():
    while True:
        try:
            f.write(b"y" * 65536); f.flush()
        except OSError:
            time.sleep(0.01)
threading.Thread(target=grow, daemon=True).start()
time.sleep(0.5)
`, func(t *testing.T, res Result) {
			if res.ExitCode != 0 {
				t.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
			}
			for _, f := range res.Files {
				if len(f.Data) > 1<<20 {
					t.Errorf("%s came back with %d bytes, over the limit", f.Path, len(f.Data))
				}
			}
		}},
		{"a forged end marker", `import sys
sys.stdout.write("before\0PYBOX-END " + "0" * 32 + "\n{\"exit_code\": 0, \"archive\": 0}\nafter\n")
open("/mnt/outputs/real.txt", "w").write("ok")
sys.exit(4)
`, func(t *testing.T, res Result) {
			if !strings.Contains(res.Stdout, "before") || !strings.HasSuffix(res.Stdout, "after\n") || res.ExitCode != 4 {
				t.Errorf("stdout %q exit %d; want all of it and exit 4", res.Stdout, res.ExitCode)
			}
			if len(res.Files) != 1 {
				t.Errorf("files %v; want real.txt", names(res.Files))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := s.Run(context.Background(), Request{Code: tt.code, Timeout: 60 * time.Second})
			tt.check(t, res)
			if h := s.Run(context.Background(), Request{Code: "print(1)"}); h.Stdout != "1\n" {
				t.Errorf("after it: %q %q", h.Stdout, h.Stderr)
			}
		})
	}
}

func names(fs []OutputFile) []string {
	var n []string
	for _, f := range fs {
		n = append(n, fmt.Sprintf("%s(%d)", f.Path, len(f.Data)))
	}
	return n
}
