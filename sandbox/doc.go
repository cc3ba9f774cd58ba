// Package sandbox runs untrusted Python code in throwaway, hardened
// containers and reports what happened as data.
//
// # Model
//
// Each call gets a container made from the sandbox image with every
// hardening default of [Options] (no network, memory, CPU and process caps,
// a read-only root, a uid of its own that is not root, no capability,
// no-new-privileges, a pinned seccomp profile, no host path and no host
// variable). Nothing in it is root. Its first process is the runner
// (runner.py), which starts the code as the main module in a process of its
// own, relays its output, and ends the call when the code's main program
// ends. The server speaks to the runner in frames over the container's
// attached streams (protocol.go) and trusts nothing it reads. The container
// is destroyed when the call ends, whatever way it ends.
//
// # One path
//
// A fresh sandbox, a pooled one (pool.go: started ahead, its modules
// imported) and a session's (session.go: one Python process, call after
// call) all serve calls through the same code, [Sandbox.Run]'s: only where
// the sandbox comes from differs. A call's timeout bounds the whole call,
// from its arrival.
//
// # Results
//
// [Sandbox.Run] never returns a Go error: every outcome, from a clean exit
// to a dead engine, is a [Result] with the same fields and an [ErrorKind]
// when the code did not run to its own end.
//
// # The engine
//
// The package speaks to the engine through small interfaces, one per
// consumer (engine.go); docker.go implements them for Docker's API and
// Podman's compatible one.
//
// # Cleanup
//
// Every container carries the [LabelManaged] and [LabelOwner] labels.
// [Sandbox.Close] removes this server's containers; [Sandbox.Reap] removes
// those a dead server on the same host left behind.
//
// The package imports no other package of pybox.
package sandbox
