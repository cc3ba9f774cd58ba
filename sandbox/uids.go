package sandbox

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
)

// uidPool gives each live sandbox a uid of its own from a range, so that
// no per-user kernel limit (processes, inotify instances, pending signals,
// message queues) is shared between sandboxes: without a user namespace a
// container's uid is the host's. A fixed user, when one is configured, is
// given to every sandbox instead.
type uidPool struct {
	fixed string // "uid:gid", or "" for the range
	base  int
	size  int

	mu   sync.Mutex
	used map[int]bool
}

func newUIDPool(fixed string, base, size int) *uidPool {
	return &uidPool{fixed: fixed, base: base, size: size, used: map[int]bool{}}
}

// take returns the user ("uid:gid") for a new sandbox and its uid, which
// goes back with give when the sandbox is gone. A random start keeps two
// servers on one host from picking the same uids.
func (p *uidPool) take() (user string, uid int) {
	if p.fixed != "" {
		return p.fixed, -1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	start := rand.IntN(p.size)
	for i := range p.size {
		uid = p.base + (start+i)%p.size
		if !p.used[uid] {
			p.used[uid] = true
			return fmt.Sprintf("%d:%d", uid, uid), uid
		}
	}
	// Every uid of the range is live: share one rather than fail.
	uid = p.base + start
	return fmt.Sprintf("%d:%d", uid, uid), -1
}

func (p *uidPool) give(uid int) {
	if uid < 0 {
		return
	}
	p.mu.Lock()
	delete(p.used, uid)
	p.mu.Unlock()
}

// parseUser reads "auto" (or "") as the range, or "uid[:gid]" with numeric
// ids, and says whether it is root.
func parseUser(user string) (fixed string, root bool, err error) {
	if user == "" || user == "auto" {
		return "", false, nil
	}
	u, g, hasG := strings.Cut(user, ":")
	if !hasG {
		g = u
	}
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if err1 != nil || err2 != nil {
		return "", false, fmt.Errorf("user %q: give numeric ids as uid:gid, or auto", user)
	}
	return fmt.Sprintf("%d:%d", uid, gid), uid == 0 || gid == 0, nil
}

// cutUser splits "uid:gid".
func cutUser(user string) (uid, gid string, ok bool) {
	uid, gid, ok = strings.Cut(user, ":")
	if !ok {
		gid = uid
	}
	return uid, gid, ok
}
