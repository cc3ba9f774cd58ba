package main

import (
	"os"
	"testing"
)

// TestBrokenStdio: only a pipe whose reader is gone counts as broken, so
// that SIGPIPE from a closed engine or cluster stream does not end the
// server (it did, on the Kubernetes backend's attach streams).
func TestBrokenStdio(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if broken(int(w.Fd())) {
		t.Fatal("a pipe with its reader is broken")
	}
	r.Close()
	if !broken(int(w.Fd())) {
		t.Fatal("a pipe without its reader is not broken")
	}
}
