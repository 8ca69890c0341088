//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// quiet reports whether nothing arrived on the idle connection c, without
// reading or waiting: bytes the upstream sent past its last answer, or its
// close, make c one to drop, as http.Transport drops an idle connection
// on which something arrives.
func quiet(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait
	})
	return err == nil && (errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK))
}
