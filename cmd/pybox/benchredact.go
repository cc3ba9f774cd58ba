package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pybox/pybox/redact/redacttest"
)

// benchRedact measures the redactor on the three kinds of text, in this
// process with the server's own configuration, then a call through a real
// `pybox serve` that leaves 20 MiB of credential-dense text files: how
// long it took and how much CPU the server spent, against its timeout.
func benchRedact(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg config
	var mib, runs int
	var runtimes, timeouts string
	if done, code := benchFlags("redact", args, stdout, stderr, &cfg, func(fs *flag.FlagSet) {
		fs.StringVar(&runtimes, "runtimes", "", "runtimes of the 20 MiB call (default: runc, and runsc where the engine has it)")
		fs.IntVar(&mib, "mib", 8, "MiB of each kind of text to redact")
		fs.IntVar(&runs, "runs", 3, "runs of each; the median is reported")
		fs.StringVar(&timeouts, "call-timeouts", "30,5", "timeouts, in seconds, of the calls that leave 20 MiB of files: the default's, and one too short to redact it all")
	}); done {
		return code
	}
	rd, err := cfg.redactor()
	if err != nil {
		fmt.Fprintln(stderr, "pybox bench redact:", err)
		return 1
	}
	size := mib << 20
	kinds := []struct{ name, text string }{
		{"plain (tables, logs, prose)", redacttest.Output(size, false)},
		{"credential-dense (`api_key=sk-ant-...` on every line)", redacttest.CredentialDense(size)},
		{"base64 (76-character lines of random bytes)", redacttest.Base64(size)},
	}
	fmt.Fprintf(stdout, "Redacting %d MiB of each kind of text in one goroutine, with the server's rules (gitleaks' 222 and pybox's, 5 decoding passes, the environment's known values); median of %d runs.\n\n", mib, runs)
	fmt.Fprintln(stdout, "| text | MiB/s | seconds per MiB |")
	fmt.Fprintln(stdout, "|---|---|---|")
	for _, k := range kinds {
		var took []time.Duration
		for range runs {
			start := time.Now()
			if _, err := rd.StringContext(ctx, k.text); err != nil {
				fmt.Fprintln(stderr, "pybox bench redact:", err)
				return 1
			}
			took = append(took, time.Since(start))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		med := took[len(took)/2].Seconds()
		fmt.Fprintf(stdout, "| %s | %.1f | %.3f |\n", k.name, float64(mib)/med, med/float64(mib))
	}

	rts, err := benchRuntimes(ctx, runtimes)
	if err != nil {
		fmt.Fprintln(stderr, "pybox bench redact:", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nA call through `pybox serve --transport http` whose code writes two files of 10 MiB less 4 KiB of credential-dense lines, with the defaults (`--max-output-bytes` 20 MiB), at the default timeout and at one too short to redact it all; the server's CPU is read from /proc:\n\n")
	fmt.Fprintln(stdout, "| runtime | call timeout | code ran | answer after | server CPU | files back, redacted | withheld | a secret left |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|")
	status := 0
	for _, rt := range rts {
		for _, ts := range strings.Split(timeouts, ",") {
			callTimeout, err := strconv.Atoi(strings.TrimSpace(ts))
			if err != nil || callTimeout <= 0 {
				fmt.Fprintf(stderr, "pybox bench redact: --call-timeouts: %q is not a number of seconds\n", ts)
				return 2
			}
			cfg.runtime = rt
			r, err := redactCall(ctx, cfg, callTimeout, stderr)
			if err != nil {
				fmt.Fprintf(stderr, "pybox bench redact: %s: %v\n", rt, err)
				return 1
			}
			fmt.Fprintf(stdout, "| %s | %d s | %.2f s | %.1f s | %.1f s | %d | %d | %s |\n", rt, callTimeout, r.ran, r.took.Seconds(), r.cpu, r.files, r.withheld, map[bool]string{true: "yes", false: "no"}[r.leaked])
			if r.leaked || r.cpu > float64(callTimeout) {
				status = 1
			}
		}
	}
	return status
}

type redactCallResult struct {
	ran      float64
	took     time.Duration
	cpu      float64
	files    int
	withheld int
	leaked   bool
}

// denseFilesCode writes two files of 10 MiB less 4 KiB of API key lines.
const denseFilesCode = `line = b"api_key=sk-ant-api03-%s\n"
for n in range(2):
    with open("/mnt/outputs/keys%d.txt" % n, "wb") as f:
        left, i = 10 * 1024 * 1024 - 4096, 0
        while left > 0:
            chunk = b"".join(line % (b"%040d%08x" % (i + k, (i + k) * 2654435761 % 4294967296)) for k in range(1000))
            f.write(chunk[:left]); left -= len(chunk); i += 1000
print("written")
`

func redactCall(ctx context.Context, cfg config, timeout int, stderr io.Writer) (redactCallResult, error) {
	var r redactCallResult
	srv, err := startServe(ctx, stderr, "--image", cfg.image, "--runtime", cfg.runtime, "--pool", "0")
	if err != nil {
		return r, err
	}
	defer srv.stop()
	addr := srv.addr
	c, err := loadClient(ctx, addr)
	if err != nil {
		return r, err
	}
	defer c.Close()
	before, err := procCPUSeconds(srv.cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "run_python"
	req.Params.Arguments = map[string]any{"code": denseFilesCode, "timeout": timeout}
	start := time.Now()
	res, err := c.CallTool(ctx, req)
	r.took = time.Since(start)
	if err != nil {
		return r, err
	}
	after, err := procCPUSeconds(srv.cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	r.cpu = after - before
	var out struct {
		Stdout        string  `json:"stdout"`
		Stderr        string  `json:"stderr"`
		ExecutionTime float64 `json:"execution_time"`
		Files         []any   `json:"files"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	if out.Stdout != "written\n" {
		return r, fmt.Errorf("the code did not run as it should: %.500s", b)
	}
	r.ran, r.files = out.ExecutionTime, len(out.Files)
	r.withheld = strings.Count(out.Stderr, "withheld")
	for _, ct := range res.Content {
		if e, ok := ct.(mcp.EmbeddedResource); ok {
			if t, ok := e.Resource.(mcp.TextResourceContents); ok && strings.Contains(t.Text, "sk-ant-api03-0") {
				r.leaked = true
			}
		}
	}
	return r, nil
}

// procCPUSeconds is the user and system CPU time a process has used.
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}
