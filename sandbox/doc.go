// Package sandbox runs untrusted Python code in throwaway, hardened Docker
// containers and reports what happened as data.
//
// # Model
//
// Each call gets a fresh container made from the sandbox image with every
// hardening default of [Options] (no network, memory, CPU and process caps,
// a read-only root, a non-root user, no capabilities, no-new-privileges, a
// pinned seccomp profile, no host path and no host variable). The code goes
// in on stdin to a small runner (runner.py) that executes it as the main
// module, so tracebacks show only the user's own frames. The container is
// destroyed when the call ends, whatever way it ends.
//
// # Results
//
// [Sandbox.Run] never returns a Go error: every outcome, from a clean exit
// to a dead engine, is a [Result] with the same fields and an [ErrorKind]
// when the code did not run to its own end.
//
// # Cleanup
//
// Every container carries the [LabelManaged] and [LabelOwner] labels.
// [Sandbox.Close] removes this server's containers; [Sandbox.Reap] removes
// those a dead server on the same host left behind.
//
// The package imports no other package of pybox.
package sandbox
