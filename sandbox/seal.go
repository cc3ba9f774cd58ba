package sandbox

import (
	"crypto/sha3"
	"encoding/binary"
	"io"
)

// sealedStream is a stream whose engine keeps what the container writes
// (the kubelet writes a pod's stdout to a log file on its node, kept as
// long as the pod): the runner seals its stdout with a key that travels
// on stdin, which no engine keeps, and the stream unseals it.
type sealedStream interface {
	seal(key []byte)
}

// sealBlock is the keystream's block: SHAKE-256(key || block number).
const sealBlock = 1 << 16

// unsealer XORs what it is given with the keystream, from its start, and
// passes it on.
type unsealer struct {
	key []byte
	w   io.Writer
	pos int64
	blk int64
	ks  []byte
	buf []byte
}

func newUnsealer(key []byte, w io.Writer) *unsealer {
	return &unsealer{key: key, w: w, blk: -1}
}

func (u *unsealer) Write(p []byte) (int, error) {
	if cap(u.buf) < len(p) {
		u.buf = make([]byte, len(p))
	}
	out := u.buf[:len(p)]
	for i := 0; i < len(p); {
		blk, off := u.pos/sealBlock, int(u.pos%sealBlock)
		if blk != u.blk {
			in := make([]byte, len(u.key)+8)
			copy(in, u.key)
			binary.LittleEndian.PutUint64(in[len(u.key):], uint64(blk))
			u.blk, u.ks = blk, sha3.SumSHAKE256(in, sealBlock)
		}
		n := min(sealBlock-off, len(p)-i)
		for j := 0; j < n; j++ {
			out[i+j] = p[i+j] ^ u.ks[off+j]
		}
		i += n
		u.pos += int64(n)
	}
	if _, err := u.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
