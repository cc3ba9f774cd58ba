// Command pybox is an MCP server that gives clients a run_python tool,
// running each call in a hardened, throwaway Docker container.
//
// With no subcommand it serves MCP over stdio. See `pybox --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// shutdownSignals end the command in the same orderly way: calls stopped,
// every container removed. SIGPIPE is among them: a write to a stdout or
// stderr whose reader died (a desktop client that quit) would otherwise
// kill the process before its cleanup.
var shutdownSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), shutdownSignals...)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
