package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownerID names this process: host, pid and the process's start time, so a
// recycled pid is not mistaken for a live server.
func ownerID() string {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return fmt.Sprintf("%s/%d/%s", host, pid, procStart(pid))
}

// procStart returns a process's start time in clock ticks since boot, or ""
// where /proc does not tell.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name may hold spaces and parentheses; fields follow the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	// After ')' come state (field 3) ... starttime is field 22 overall.
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// ownerAlive reports whether the server that owns a container still runs.
// Containers of other hosts are never judged dead: their owner cannot be
// seen from here.
func ownerAlive(owner string) (alive, known bool) {
	parts := strings.Split(owner, "/")
	if len(parts) != 3 {
		return false, true
	}
	host, _ := os.Hostname()
	if parts[0] != host {
		return true, false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return false, true
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false, true
	}
	if parts[2] != "" && procStart(pid) != "" && procStart(pid) != parts[2] {
		return false, true // the pid was reused
	}
	return true, true
}

// Reconciler timing.
const (
	// DefaultReconcileInterval is how often the reconciler looks.
	DefaultReconcileInterval = 30 * time.Second
	// untrackedGrace is how old a container of this server must be, with
	// no box of this server holding it, before the reconciler removes it.
	untrackedGrace = time.Minute
	// abandonedWatch is how long the reconciler looks for the container of
	// a create pybox stopped waiting for.
	abandonedWatch = 10 * time.Minute
)

// Reap removes what should be gone, once: the labelled containers that a
// server on this host left behind when it died without cleaning up
// (SIGKILL, a crash, a power cut), containers of this server whose removal
// failed or that it no longer tracks. Containers of live servers, and of
// other hosts sharing the engine, are left alone. It returns how many it
// removed. The reconciler runs it every [Options.ReconcileInterval].
func (s *Sandbox) Reap(ctx context.Context) (int, error) {
	lctx, cancel := withEngineTimeout(ctx)
	defer cancel()
	cs, err := s.lst.List(lctx, map[string]string{LabelManaged: "true"})
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	tracked := make(map[string]bool, len(s.active))
	for id := range s.active {
		tracked[id] = true
	}
	failed := make([]string, 0, len(s.failed))
	for id := range s.failed {
		failed = append(failed, id)
	}
	abandoned := map[string]bool{}
	for call, at := range s.abandoned {
		if time.Since(at) > abandonedWatch {
			delete(s.abandoned, call)
		} else {
			abandoned[call] = true
		}
	}
	s.mu.Unlock()
	n := 0
	var errs []error
	for _, c := range cs {
		owner := c.Labels[LabelOwner]
		switch {
		case c.Labels[LabelSessionKey] != "" && c.State == "running":
			// A shared session's pod: every replica may use it, whoever
			// started it; it ends when idle, ended or at its deadline.
			continue
		case owner == s.owner:
			if tracked[c.ID] || time.Since(c.Created) < untrackedGrace && !abandoned[c.Labels[LabelCall]] {
				continue
			}
		default:
			if alive, _ := ownerAlive(owner); alive {
				continue
			}
		}
		if err := s.counts.removal(s.lst.Remove(lctx, c.ID)); err != nil {
			errs = append(errs, err)
			continue
		}
		s.log.Info().Str("container", shortID(c.ID)).Str("owner", owner).Msg("removed a container nobody holds")
		n++
	}
	// Removals that failed earlier (the engine was down), tried again.
	for _, id := range failed {
		if err := s.remove(lctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// reconcile runs Reap every interval until Close, as nomad's docker driver
// reconciles its containers: nothing waits for another server to start.
func (s *Sandbox) reconcile() {
	defer close(s.reconciled)
	t := time.NewTicker(s.opt.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if n, err := s.Reap(context.Background()); err != nil {
			s.log.Debug().Err(err).Msg("reconciling containers failed; trying again later")
		} else if n > 0 {
			s.log.Info().Int("removed", n).Msg("the reconciler removed containers")
		}
	}
}

func withEngineTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, engineCallTimeout)
}
