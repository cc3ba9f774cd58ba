// Command pybox is an MCP server that gives clients a run_python tool,
// running each call in a hardened, throwaway sandbox: a container of a
// Docker engine, or a pod of a Kubernetes cluster.
//
// With no subcommand it serves MCP over stdio. See `pybox --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// shutdownSignals end the command in the same orderly way: calls stopped,
// every sandbox removed.
var shutdownSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), shutdownSignals...)
	ctx, cancel := context.WithCancel(ctx)
	go onBrokenStdio(cancel)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	cancel()
	stop()
	os.Exit(code)
}

// onBrokenStdio ends the command in the same orderly way when a write to a
// stdout or stderr whose reader died (a desktop client that quit) raises
// SIGPIPE, which would otherwise kill the process before its cleanup.
// Once SIGPIPE is caught, Go delivers it for a write to any broken pipe or
// socket (a stream to the engine or the cluster that its far end closed,
// which the write's own error reports): only a broken stdout or stderr
// ends the command.
func onBrokenStdio(cancel context.CancelFunc) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGPIPE)
	for range c {
		if broken(1) || broken(2) {
			cancel()
			return
		}
	}
}

// broken reports whether fd is a pipe or socket whose reader is gone.
func broken(fd int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(p, 0)
	return err == nil && n > 0 && p[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
}
