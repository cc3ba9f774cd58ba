package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pybox/pybox/sandbox"
)

// input is a checked run_python call.
type input struct {
	Code    string
	Timeout time.Duration
	Files   []sandbox.InputFile
	Session string
}

// allowedFields are the input's properties, for the unknown-field message.
var allowedFields = []string{"code", "timeout", "files", "session_id"}

// parseInput checks a call's arguments. Its errors are written for the
// model that made the call: what is wrong and what is accepted.
func parseInput(raw any, opt Options) (input, error) {
	if raw == nil {
		return input{}, errors.New(`"code" is required: pass {"code": "print(1)"}`)
	}
	args, err := argsMap(raw)
	if err != nil {
		return input{}, errors.New("arguments must be a JSON object with a \"code\" string")
	}
	var unknown []string
	for k := range args {
		if !slices.Contains(allowedFields, k) {
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return input{}, fmt.Errorf("unknown argument %s; the accepted ones are %s", strings.Join(unknown, ", "), strings.Join(allowedFields, ", "))
	}
	var in input
	c, ok := args["code"]
	if !ok || c == nil {
		return input{}, errors.New(`"code" is required: the Python source to run`)
	}
	code, ok := c.(string)
	if !ok {
		return input{}, fmt.Errorf(`"code" must be a string of Python source, not %s`, jsonType(c))
	}
	if len(code) > sandbox.MaxCodeBytes {
		return input{}, fmt.Errorf(`"code" is %d bytes; at most %d are accepted (send data as a file instead)`, len(code), sandbox.MaxCodeBytes)
	}
	if !utf8.ValidString(code) {
		return input{}, errors.New(`"code" is not valid UTF-8`)
	}
	in.Code = code
	in.Timeout = opt.DefaultTimeout
	if t, ok := args["timeout"]; ok && t != nil {
		secs, ok := t.(float64)
		if !ok {
			if n, isNum := t.(json.Number); isNum {
				f, err := n.Float64()
				secs, ok = f, err == nil
			}
		}
		if !ok {
			return input{}, fmt.Errorf(`"timeout" must be a number of seconds, not %s`, jsonType(t))
		}
		max := opt.MaxTimeout.Seconds()
		if math.IsNaN(secs) || secs <= 0 || secs > max {
			return input{}, fmt.Errorf(`"timeout" is %g seconds; it must be more than 0 and at most %g`, secs, max)
		}
		in.Timeout = time.Duration(secs * float64(time.Second))
	}
	if v, ok := args["session_id"]; ok && v != nil {
		id, ok := v.(string)
		if !ok || id == "" {
			return input{}, errors.New(`"session_id" must be "new" or the session_id of an earlier result`)
		}
		in.Session = id
	}
	if f, ok := args["files"]; ok && f != nil {
		files, err := parseFiles(f)
		if err != nil {
			return input{}, err
		}
		in.Files = files
	}
	return in, nil
}

// argsMap reads a tool call's arguments as a JSON object; nil is empty.
func argsMap(raw any) (map[string]any, error) {
	switch a := raw.(type) {
	case nil:
		return map[string]any{}, nil
	case map[string]any:
		return a, nil
	case json.RawMessage:
		var m map[string]any
		if err := json.Unmarshal(a, &m); err != nil || m == nil {
			return nil, errors.New("arguments must be a JSON object")
		}
		return m, nil
	case []byte:
		return argsMap(json.RawMessage(a))
	}
	return nil, errors.New("arguments must be a JSON object")
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func inputSchema(opt Options) json.RawMessage {
	s := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"code": map[string]any{
				"type":        "string",
				"description": "Python 3 source, run as the main module (a script, not a notebook cell: print what you want to see).",
			},
			"session_id": map[string]any{
				"type":        "string",
				"description": `"new" starts a persistent session (variables, imports and files kept across calls); the session_id of an earlier result runs there. Leave it out for a fresh sandbox.`,
			},
			"files": map[string]any{
				"type":        "array",
				"description": "Files written under /mnt/user-data/ before the code runs, read-only to it (about 10 MiB in all).",
				"items": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"path":     map[string]any{"type": "string", "description": "Relative path under /mnt/user-data/, such as data/sales.csv; no '..'."},
						"content":  map[string]any{"type": "string", "description": "The file's content: text, or base64 when encoding is base64."},
						"encoding": map[string]any{"type": "string", "enum": []string{"utf-8", "base64"}, "default": "utf-8"},
					},
					"required":             []string{"path", "content"},
					"additionalProperties": false,
				},
			},
			"timeout": map[string]any{
				"type":             "number",
				"description":      fmt.Sprintf("Wall-clock limit in seconds; default %g, at most %g.", opt.DefaultTimeout.Seconds(), opt.MaxTimeout.Seconds()),
				"exclusiveMinimum": 0,
				"maximum":          opt.MaxTimeout.Seconds(),
				"default":          opt.DefaultTimeout.Seconds(),
			},
		},
		"required":             []string{"code"},
		"additionalProperties": false,
	}
	b, _ := json.Marshal(s)
	return b
}

// outputSchema describes [Output].
var outputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "stdout": {"type": "string", "description": "The code's standard output, with secrets redacted."},
    "stderr": {"type": "string", "description": "The code's standard error, with secrets redacted; on a sandbox failure, what went wrong and what to do."},
    "exit_code": {"type": "integer", "description": "The code's exit status; 124 on timeout, 137 when killed for memory, 1 when it could not run."},
    "execution_time": {"type": "number", "description": "Seconds of wall clock the code ran (the timeout counts the whole call, waits included)."},
    "error": {"type": "string", "enum": ["timeout", "memory_limit", "invalid_input", "sandbox_unavailable", "too_many_requests", "session_expired", "sandbox_lost", "cancelled"], "description": "Why the code did not run to its own end. sandbox_lost: the sandbox was killed by something other than pybox's own limits (the engine, an operator)."},
    "truncated": {"type": "boolean", "description": "An output stream passed its cap; its head and tail are kept with a marker between them."},
    "session_id": {"type": "string", "description": "The session's id, to pass on the next call."},
    "files": {"type": "array", "description": "The files the code wrote under /mnt/outputs/, each also sent as image or resource content.", "items": {"type": "object", "properties": {"path": {"type": "string"}, "mime_type": {"type": "string"}, "size": {"type": "integer"}}, "required": ["path", "mime_type", "size"]}}
  },
  "required": ["stdout", "stderr", "exit_code", "execution_time"]
}`)

func description(opt Options) string {
	net := "no network access"
	if opt.Limits.Network {
		net = "network access"
	}
	mem := opt.Limits.MemoryMiB
	if mem == 0 {
		mem = sandbox.DefaultMemoryBytes >> 20
	}
	cpus := opt.Limits.CPUs
	if cpus == 0 {
		cpus = 1
	}
	out := opt.Limits.OutputBytes
	if out == 0 {
		out = sandbox.DefaultOutputLimit
	}
	return fmt.Sprintf(`Run Python 3 code in a fresh, isolated sandbox and get back stdout, stderr, exit_code and execution_time.

Use it whenever an exact answer matters: arithmetic and statistics, data analysis, checking a claim or a piece of code, generating tables. Do not guess numbers you can compute.

Installed: Python 3.13 with numpy, pandas, matplotlib, scipy, scikit-learn, seaborn, statsmodels, sympy, pillow, openpyxl, beautifulsoup4 and requests. Nothing can be installed (no pip).

Files: pass input files in "files"; the code reads them under /mnt/user-data/. Save what the user should get (charts, CSVs, reports) under /mnt/outputs/: every file there comes back, images shown as images. A matplotlib figure still open at the end, or shown with plt.show(), comes back as a PNG.

Sessions: pass session_id "new" to keep state across calls (variables, imports, files); pass the returned session_id on later calls. Without it every call starts from scratch. A timeout in a session interrupts the code like Ctrl-C.

Limits: %g CPU, %d MiB of memory, %s, a %gs default timeout (the timeout argument raises it up to %gs), output kept up to %d KiB per stream (head and tail). /tmp and /mnt/outputs are writable; the rest of the filesystem is read-only. Without a session, every call starts from scratch: define everything you use in the same code.

Print what you want to see. Check exit_code: 0 means success; otherwise read stderr (the traceback names the failing line of your code), fix the code and run it again. exit_code 124 means it timed out, 137 that it ran out of memory.`,
		cpus, mem, net, opt.DefaultTimeout.Seconds(), opt.MaxTimeout.Seconds(), out>>10)
}
