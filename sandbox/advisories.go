package sandbox

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Advisories returns what an operator should know about the engine's
// defences: known container-escape fixes missing from its runc, and the
// stronger settings that exist and whether they are in use.
func (e EngineInfo) Advisories(runtime string) []string {
	var out []string
	if e.Product == "Kubernetes" {
		// The cluster's nodes are not seen from here: its runc and kernel
		// are the operator's to keep current.
		if runtime != "gvisor" {
			out = append(out, "stronger isolation: a gVisor RuntimeClass (deploy/kubernetes/runtimeclass-gvisor.yaml, with the runsc shim on the nodes) and --runtime-class gvisor run every sandbox pod under a user-space kernel")
		}
		return out
	}
	if v, ok := parseVersion(e.RuncVersion); ok && runcVulnerable(v) {
		out = append(out, fmt.Sprintf("runc %s lacks the fixes for CVE-2025-31133, CVE-2025-52565 and CVE-2025-52881 (container escapes through /dev/null masking, /dev/console and procfs writes; fixed in runc 1.2.8, 1.3.3 and 1.4.0-rc.3): upgrade the engine's runc, or run calls under gVisor (--runtime runsc)", e.RuncVersion))
	}
	podman := e.Product == "Podman"
	if v, ok := parseVersion(e.ServerVersion); ok && v[0] < 25 && !podman {
		out = append(out, fmt.Sprintf("Docker Engine %s is past its end of life; a current engine gets security fixes", e.ServerVersion))
	}
	if runtime != "runsc" {
		have := "not registered with this engine (scripts/ensure-gvisor.sh registers it)"
		switch {
		case podman:
			// Podman's compatible API runs its default runtime whatever a
			// container asks for, and lists every runtime it knows of.
			have = "not selectable through Podman's Docker-compatible API (pybox refuses a container Podman would run under another runtime): use Docker for gVisor"
		case slices.Contains(e.Runtimes, "runsc"):
			have = "registered with this engine"
		}
		out = append(out, "stronger isolation: --runtime runsc runs every call under gVisor, a user-space kernel between the code and the host's; runsc is "+have)
	}
	userns := false
	for _, o := range e.SecurityOptions {
		userns = userns || strings.Contains(o, "name=userns")
	}
	switch {
	case podman:
		out = append(out, "stronger isolation: a rootless Podman service, or userns = \"auto\" in containers.conf, maps the sandbox's users to unprivileged host users")
	case !userns:
		out = append(out, "stronger isolation: user-namespace remapping (\"userns-remap\": \"default\" in /etc/docker/daemon.json) maps the sandbox's users to unprivileged host users")
	}
	return out
}

// parseVersion reads "1.1.5+ds1", "20.10.24+dfsg1" or "v1.2.8" as numbers.
func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexAny(s, "+-~ "); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return v, false
	}
	for i := 0; i < 3 && i < len(parts); i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// runcVulnerable reports whether a runc lacks the November 2025 fixes.
func runcVulnerable(v [3]int) bool {
	switch {
	case v[0] != 1:
		return false
	case v[1] < 2:
		return true
	case v[1] == 2:
		return v[2] < 8
	case v[1] == 3:
		return v[2] < 3
	}
	return false
}
