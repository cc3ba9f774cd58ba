package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
)

const topUsage = `pybox: an MCP server with a run_python tool that runs code in a hardened, throwaway Docker container.

Usage:
  pybox                      serve MCP over stdio (what a client config runs)
  pybox serve [flags]        serve MCP over stdio, Streamable HTTP (/mcp) or SSE
  pybox exec [flags] -c CODE | FILE | -
                             run code once and print the result as JSON
  pybox image build [flags]  build the sandbox image from Debian packages
  pybox image check [flags]  say whether the image is present and what it holds
  pybox doctor [flags]       check everything a first run needs
  pybox bench [flags]        measure latency and throughput, pool off against on
  pybox version              print the version

Run 'pybox COMMAND --help' for a command's flags.`

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// run is the whole command; it returns the process's exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := "serve"
	args = commandFirst(args)
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	} else if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprintln(stdout, topUsage)
		var cfg config
		usage(flagSet("serve", true, &cfg), stdout, "\nServe flags (also for plain `pybox`):")
		return 0
	}
	switch cmd {
	case "serve":
		return cmdServe(ctx, args, stdin, stdout, stderr)
	case "exec":
		return cmdExec(ctx, args, stdin, stdout, stderr)
	case "image":
		return cmdImage(ctx, args, stdout, stderr)
	case "doctor":
		return cmdDoctor(ctx, args, stdout, stderr)
	case "bench":
		return cmdBench(ctx, args, stdout, stderr)
	case "janitor":
		return cmdJanitor(ctx, args, stderr)
	case "version":
		fmt.Fprintln(stdout, "pybox", version())
		return 0
	case "help":
		fmt.Fprintln(stdout, topUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "pybox: unknown command %q\n\n%s\n", cmd, topUsage)
		return 2
	}
}

// commands are the words run knows.
var commands = []string{"serve", "exec", "image", "doctor", "bench", "janitor", "version", "help"}

// commandFirst lets flags come before the command (pybox --backend
// kubernetes exec -c ...): the first command word that is not a flag's
// value moves to the front, and the flags before it after it.
func commandFirst(args []string) []string {
	if len(args) == 0 || !strings.HasPrefix(args[0], "-") {
		return args
	}
	var cfg config
	fs := flagSet("serve", true, &cfg)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return args
		}
		if !strings.HasPrefix(a, "-") {
			if slices.Contains(commands, a) {
				return append(append([]string{a}, args[:i]...), args[i+1:]...)
			}
			return args
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			return args
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
			i++ // its value
		}
	}
	return args
}

// parseCommand parses a command's flags; done is true when the command
// should stop with status code (help shown, or a bad flag).
func parseCommand(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, head string, cfg *config) (done bool, code int) {
	fs.Usage = func() { usage(fs, stdout, head) }
	if err := parse(fs, args, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, 0
		}
		return true, 2
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, "pybox:", err)
		return true, 2
	}
	return false, 0
}
