package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/pybox/pybox/sandbox"
)

// The janitor is a small process beside each server: when the server is
// gone, however it went (SIGKILL included), it removes the server's
// containers and exits. Sandboxes mostly end themselves (a runner ends
// with its attach stream, and the engine removes it); the janitor covers
// what cannot: a container the server had made but not yet started.

// startJanitor starts the janitor of this process, in a session of its own
// so that what ends the server (a terminal's hangup, a signal to its
// group) does not end it too.
func startJanitor() {
	self, err := os.Executable()
	if err != nil {
		return
	}
	pid := os.Getpid()
	cmd := exec.Command(self, "janitor", "--pid", strconv.Itoa(pid), "--started", procStarted(pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cmd.Start() == nil {
		go cmd.Wait()
	}
}

// procStarted is a process's start time in clock ticks since boot, which
// tells it from a later process with the same pid.
func procStarted(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

func cmdJanitor(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("janitor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.Int("pid", 0, "the server's pid")
	started := fs.String("started", "", "the server's start time, from /proc")
	if err := fs.Parse(args); err != nil || *pid <= 0 {
		fmt.Fprintln(stderr, "Usage: pybox janitor --pid PID --started TICKS (started by pybox serve)")
		return 2
	}
	// Only the server's end matters: signals that end a server do not end
	// its janitor.
	ctx = context.WithoutCancel(ctx)
	for procStarted(*pid) != "" && (*started == "" || procStarted(*pid) == *started) {
		time.Sleep(500 * time.Millisecond)
	}
	sb, err := sandbox.New(sandbox.Options{}, zerolog.Nop())
	if err != nil {
		return 1
	}
	defer sb.Close(ctx)
	// Reap removes the containers of every dead server of this host, this
	// one's among them; the engine may be restarting, so try for a while.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if _, err := sb.Reap(ctx); err == nil {
			return 0
		}
	}
	return 1
}
