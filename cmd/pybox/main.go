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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
