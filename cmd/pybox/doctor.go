package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/pybox/pybox/sandbox"
)

// wallsProbe prints what the code can see of its own confinement.
const wallsProbe = `
import os, socket
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
ifaces = sorted(n for _, n in socket.if_nameindex())
ro = False
try:
    open("/pybox-probe", "w")
except OSError:
    ro = True
print("uid", os.getuid())
print("ifaces", ",".join(ifaces))
print("capeff", status["CapEff"].strip())
print("nonewprivs", status.get("NoNewPrivs", "?").strip())
print("seccomp", status.get("Seccomp", "?").strip())
print("readonly", ro)
`

func cmdDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg config
	fs := flagSet("doctor", true, &cfg)
	head := "Usage: pybox doctor [flags]\n\nChecks the engine, the runtime, the image and the sandbox's walls, and says how to fix each failure."
	if done, code := parseCommand(fs, args, stdout, stderr, head, &cfg); done {
		return code
	}
	failed := 0
	check := func(ok bool, name, detail, fix string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(stdout, "%s %-10s %s\n", mark, name, detail)
		if !ok && fix != "" {
			fmt.Fprintf(stdout, "     fix: %s\n", fix)
		}
	}
	opt := cfg.sandboxOptions(nil)
	opt.PoolSize = 0
	sb, err := sandbox.New(opt, zerolog.Nop())
	if err != nil {
		check(false, "config", err.Error(), "correct the flag or PYBOX_* variable")
		return 1
	}
	kube := cfg.backend == "kubernetes"
	where := sb.EngineHost()
	engineFix := "start Docker (`sudo systemctl start docker`, or `sudo scripts/ensure-docker.sh` from the pybox repository), or set DOCKER_HOST to a running engine"
	switch {
	case kube:
		where = "the cluster at " + where
		engineFix = "check the kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config, or the service account in a pod); on this machine `sudo scripts/ensure-kubernetes.sh`, then run pybox in its network namespace: `ip netns exec pybox-k8s pybox ...`"
	case os.Getenv("DOCKER_HOST") != "":
		where += " (from DOCKER_HOST)"
	default:
		where += " (the default; DOCKER_HOST is not set)"
	}
	if !kube {
		fmt.Fprintf(stdout, "info %-10s %s\n", "sockets", socketsSeen())
	}
	api, err := sb.Ping(ctx)
	if err != nil {
		where += ": " + err.Error()
	}
	check(err == nil, "engine", fmt.Sprintf("%s answers: %v", where, err == nil), engineFix)
	if err != nil {
		fmt.Fprintf(stdout, "%d check(s) failed\n", failed)
		return 1
	}
	info, err := sb.EngineInfo(ctx)
	if kube {
		check(err == nil, "api", fmt.Sprintf("%s %s, namespace %q, RuntimeClasses: %s", info.Product, api, info.Namespace, strings.Join(info.Runtimes, ", ")), "")
	} else {
		check(err == nil, "api", fmt.Sprintf("API %s, %s %s, runc %s, cgroup v%s", api, info.Product, info.ServerVersion, info.RuncVersion, info.CgroupVersion), "")
	}
	for _, a := range info.Advisories(cfg.runtimeName()) {
		fmt.Fprintf(stdout, "note %-10s %s\n", "security", a)
	}
	rt := cfg.runtime
	fix := fmt.Sprintf("register %q in /etc/docker/daemon.json under \"runtimes\" and reload dockerd (SIGHUP), or use --runtime runc", rt)
	if kube {
		if rc := cfg.runtimeClass; rc != "" {
			check(slices.Contains(info.Runtimes, rc), "runtime", fmt.Sprintf("RuntimeClass %q wanted; the cluster has %s", rc, strings.Join(info.Runtimes, ", ")), "apply a RuntimeClass (deploy/kubernetes/runtimeclass-gvisor.yaml) whose handler the nodes' runtime has")
		}
	} else if info.Product == "Podman" && rt != "runc" {
		// Podman lists the runtimes its configuration names, installed or
		// not, and its compatible API runs its default one: the sandbox
		// check below shows whether that is the one wanted.
		fmt.Fprintf(stdout, "note %-10s %q wanted; Podman's Docker-compatible API runs its default runtime, and pybox refuses a container under another (see the sandbox check)\n", "runtime", rt)
	} else {
		check(slices.Contains(info.Runtimes, rt), "runtime", fmt.Sprintf("%q wanted; the engine has %s", rt, strings.Join(info.Runtimes, ", ")), fix)
	}
	st, err := sb.ImageStatus(ctx)
	switch {
	case err != nil:
		check(false, "image", err.Error(), "")
	case !st.Present:
		fix := "sudo pybox image build"
		if kube {
			fix = "load the image onto the nodes (scripts/ensure-kubernetes.sh does on this machine) or push it to a registry they pull from, and set --image-pull-policy"
		}
		check(false, "image", st.Ref+" is missing", fix)
	case st.Unverified:
		check(true, "image", fmt.Sprintf("%s on a node (the cluster does not report its version label; want %q)", st.Ref, sandbox.ImageVersion), "")
	default:
		check(st.Current, "image", fmt.Sprintf("%s present, version %q (want %q)", st.Ref, st.Version, sandbox.ImageVersion), "sudo pybox image build")
	}
	if failed == 0 {
		res := sb.Run(ctx, sandbox.Request{Code: wallsProbe, Timeout: 60e9})
		ok := res.Error == "" && res.ExitCode == 0
		detail := fmt.Sprintf("a hardened sandbox ran in %.2fs", res.Duration.Seconds())
		if ok {
			walls := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
				k, v, _ := strings.Cut(l, " ")
				walls[k] = v
			}
			var bad []string
			if walls["uid"] == "0" {
				bad = append(bad, "runs as root")
			}
			// A pod always has its network device: the NetworkPolicy (and
			// the network plugin that enforces it) isolate it.
			if !cfg.network && !kube && walls["ifaces"] != "lo" && walls["ifaces"] != "" {
				bad = append(bad, "network interfaces "+walls["ifaces"])
			}
			if cfg.capDropAll && walls["capeff"] != "0000000000000000" {
				bad = append(bad, "capabilities "+walls["capeff"])
			}
			if cfg.noNewPrivs && walls["nonewprivs"] != "1" && !(cfg.runtime == "runsc" && walls["nonewprivs"] == "?") {
				bad = append(bad, "no-new-privileges off")
			}
			if cfg.seccomp != sandbox.SeccompUnconfined && walls["seccomp"] != "2" && !(cfg.runtime == "runsc" && walls["seccomp"] == "?") {
				bad = append(bad, "no seccomp filter")
			}
			if cfg.readOnly && walls["readonly"] != "True" {
				bad = append(bad, "root is writable")
			}
			if len(bad) > 0 {
				ok = false
				detail = "walls missing: " + strings.Join(bad, "; ")
			} else {
				detail += fmt.Sprintf(": uid %s, interfaces %s, CapEff 0, no-new-privileges, seccomp, read-only root", walls["uid"], walls["ifaces"])
			}
		} else {
			detail = fmt.Sprintf("the test run failed: %s %s", res.Error, strings.TrimSpace(res.Stderr))
		}
		check(ok, "sandbox", detail, "see the message; `pybox exec -c 'print(1)'` shows a run's full result")
		_ = sb.Close(ctx)
	}
	if cfg.transport != "stdio" {
		err := checkExposure(cfg.addr, len(cfg.tokens) > 0)
		check(err == nil, "transport", fmt.Sprintf("%s on %s, tokens: %d", cfg.transport, cfg.addr, len(cfg.tokens)), "set PYBOX_AUTH_TOKEN or bind 127.0.0.1")
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d check(s) failed\n", failed)
		return 1
	}
	fmt.Fprintln(stdout, "all checks passed")
	return 0
}

// socketsSeen names the usual engine sockets of Linux, macOS (Docker
// Desktop, Colima, Podman) and Windows that exist on this machine.
func socketsSeen() string {
	home, _ := os.UserHomeDir()
	paths := []string{
		"/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock",
		fmt.Sprintf("/run/user/%d/podman/podman.sock", os.Getuid()),
		home + "/.docker/run/docker.sock", home + "/.colima/default/docker.sock",
		home + "/.local/share/containers/podman/machine/podman.sock",
		`\\.\pipe\docker_engine`,
	}
	var found, missing []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			found = append(found, p)
		} else {
			missing = append(missing, p)
		}
	}
	if ctx := dockerContext(home); ctx != "" {
		found = append(found, "docker context "+ctx+" (set DOCKER_HOST to its endpoint; pybox reads DOCKER_HOST, not contexts)")
	}
	if len(found) == 0 {
		return "none of " + strings.Join(missing, ", ") + " exists"
	}
	return "found " + strings.Join(found, ", ")
}

// dockerContext is the Docker CLI's current context, if one is set.
func dockerContext(home string) string {
	if c := os.Getenv("DOCKER_CONTEXT"); c != "" {
		return c
	}
	b, err := os.ReadFile(home + "/.docker/config.json")
	if err != nil {
		return ""
	}
	var cfg struct {
		CurrentContext string `json:"currentContext"`
	}
	if json.Unmarshal(b, &cfg) != nil || cfg.CurrentContext == "default" {
		return ""
	}
	return cfg.CurrentContext
}
