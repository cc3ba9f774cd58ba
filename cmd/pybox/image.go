package main

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/rs/zerolog"

	"github.com/pybox/pybox/sandbox"
)

func cmdImage(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "build" && args[0] != "check") {
		fmt.Fprintln(stderr, "Usage: pybox image build|check [flags]")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return 0
		}
		return 2
	}
	sub, args := args[0], args[1:]
	var cfg config
	fs := flagSet("image "+sub, false, &cfg)
	var mirror, rootfs string
	var keep, ifMissing bool
	if sub == "build" {
		fs.StringVar(&mirror, "mirror", "", "Debian mirror (default: the one the machine's apt sources name)")
		fs.StringVar(&rootfs, "rootfs", "", "import this bootstrapped root instead of making one")
		fs.BoolVar(&keep, "keep", false, "keep the bootstrapped root on disk")
		fs.BoolVar(&ifMissing, "if-missing", false, "do nothing when the current image is already present")
	}
	head := map[string]string{
		"build": "Usage: pybox image build [flags]\n\nBootstraps a minimal Debian " + sandbox.ImageSuite + " root with the sandbox's packages (needs root and debootstrap) and imports it as --image.",
		"check": "Usage: pybox image check [flags]\n\nSays whether --image is present and current, and what it holds.",
	}[sub]
	if done, code := parseCommand(fs, args, stdout, stderr, head, &cfg); done {
		return code
	}
	sb, err := sandbox.New(cfg.sandboxOptions(nil), zerolog.Nop())
	if err != nil {
		fmt.Fprintln(stderr, "pybox:", err)
		return 2
	}
	// The check runs a probe in a sandbox: nothing of it outlives the command.
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		sb.Close(cctx)
	}()
	if _, err := sb.Ping(ctx); err != nil {
		fmt.Fprintf(stderr, "pybox: %v\nStart the engine (or run scripts/ensure-docker.sh as root) and try again.\n", err)
		return 1
	}
	if sub == "build" {
		if ifMissing {
			if st, err := sb.ImageStatus(ctx); err == nil && st.Present && st.Current {
				fmt.Fprintf(stdout, "pybox image build: %s is present and current (version %s)\n", st.Ref, st.Version)
				return 0
			}
		}
		err := sb.BuildImage(ctx, sandbox.BuildOptions{Ref: cfg.image, Mirror: mirror, RootFS: rootfs, Keep: keep, Progress: stderr})
		if err != nil {
			fmt.Fprintln(stderr, "pybox image build:", err)
			return 1
		}
		fmt.Fprintf(stdout, "pybox image build: built %s\n", cfg.image)
		return imageCheck(ctx, sb, stdout, stderr)
	}
	return imageCheck(ctx, sb, stdout, stderr)
}

func imageCheck(ctx context.Context, sb *sandbox.Sandbox, stdout, stderr io.Writer) int {
	st, err := sb.ImageStatus(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "pybox image check:", err)
		return 1
	}
	if !st.Present {
		fmt.Fprintf(stdout, "image %s: missing. Build it with `sudo pybox image build`.\n", st.Ref)
		return 1
	}
	fmt.Fprintf(stdout, "image %s: present (id %.19s, %d MB, version %q)\n", st.Ref, st.ID, st.Size>>20, st.Version)
	c, _, err := sb.ImageContents(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "pybox image check: could not run the image:", err)
		return 1
	}
	fmt.Fprintf(stdout, "python %s, %d Debian packages\n", c.Python, c.Packages)
	names := make([]string, 0, len(c.Modules))
	for n := range c.Modules {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(stdout, "  %-15s %s\n", n, c.Modules[n])
	}
	code := 0
	if len(c.Missing) > 0 {
		fmt.Fprintf(stdout, "missing modules: %v; rebuild with `sudo pybox image build`\n", c.Missing)
		code = 1
	}
	if !st.Current {
		fmt.Fprintf(stdout, "the image is version %q; this pybox expects %q: rebuild with `sudo pybox image build`\n", st.Version, sandbox.ImageVersion)
		code = 1
	}
	return code
}
