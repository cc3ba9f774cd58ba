package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/pybox/pybox/sandbox"
	"github.com/pybox/pybox/server"
)

func cmdExec(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var cfg config
	fs := flagSet("exec", false, &cfg)
	code := fs.String("c", "", "the code to run (instead of FILE or -)")
	head := "Usage: pybox exec [flags] -c CODE | FILE | -\n\nRuns the code once in a sandbox and prints the result as JSON. The exit status is the code's exit_code."
	if done, status := parseCommand(fs, args, stdout, stderr, head, &cfg); done {
		return status
	}
	haveC := false
	fs.Visit(func(f *flag.Flag) { haveC = haveC || f.Name == "c" })
	src, err := execSource(fs.Args(), *code, haveC, stdin)
	if err != nil {
		fmt.Fprintln(stderr, "pybox exec:", err)
		return 2
	}
	rd, logger, err := cfg.logging(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "pybox:", err)
		return 2
	}
	sb, err := sandbox.New(cfg.sandboxOptions(rd), logger)
	if err != nil {
		fmt.Fprintln(stderr, "pybox:", err)
		return 2
	}
	if _, err := sb.Ping(ctx); err == nil {
		_, _ = sb.Reap(ctx)
	}
	res := sb.Run(ctx, sandbox.Request{Code: src, Timeout: cfg.timeout})
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	_ = sb.Close(cctx)
	out := server.FromResult(res)
	logger.Debug().Str("error", out.Error).Int("exit_code", out.ExitCode).Msg("exec")
	if res.Cause != nil {
		logger.Debug().Str("cause", rd.String(res.Cause.Error())).Msg("exec")
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return 1
	}
	return out.ExitCode
}

// execSource finds the code: -c, a file, or - for stdin.
func execSource(args []string, code string, haveC bool, stdin io.Reader) (string, error) {
	switch {
	case haveC && len(args) > 0:
		return "", fmt.Errorf("give -c CODE or a FILE, not both")
	case haveC:
		return code, nil
	case len(args) == 0:
		return "", fmt.Errorf("no code: give -c CODE, a FILE, or - to read stdin")
	case len(args) > 1:
		return "", fmt.Errorf("one FILE at a time (got %d)", len(args))
	case args[0] == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, sandbox.MaxCodeBytes+1))
		if err != nil {
			return "", err
		}
		return string(b), nil
	default:
		b, err := os.ReadFile(args[0])
		return string(b), err
	}
}
