//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package proxy

import (
	"net"
	"syscall"
)

// quietProbe returns a function reporting whether nothing arrived on the
// idle connection c, without reading or waiting: bytes the upstream sent
// past its last answer, or its close, make c one to drop, as
// http.Transport drops an idle connection on which something arrives.
// The function is made once per connection, so a probe costs no
// allocation.
func quietProbe(c net.Conn) func() bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return func() bool { return true }
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() bool { return false }
	}
	var b [1]byte
	var rerr error
	peek := func(fd uintptr) bool {
		_, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait
	}
	return func() bool {
		if rc.Read(peek) != nil {
			return false
		}
		return rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
	}
}
