//go:build linux

package sandbox

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/moby/profiles/seccomp"
)

// TestPinnedSeccompIsMobyDefault keeps the shipped profile equal to moby's
// default at the version go.mod pins, and checks what it was pinned for.
func TestPinnedSeccompIsMobyDefault(t *testing.T) {
	want, err := json.Marshal(seccomp.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal([]byte(pinnedSeccomp), &a); err != nil {
		t.Fatalf("seccomp.json: %v", err)
	}
	json.Unmarshal(want, &b)
	if !reflect.DeepEqual(a, b) {
		t.Error("sandbox/seccomp.json differs from github.com/moby/profiles/seccomp's DefaultProfile(); copy default.json from the module again")
	}
	if strings.Contains(pinnedSeccomp, `"io_uring_setup"`) {
		t.Error("the pinned profile allows io_uring_setup")
	}
}
