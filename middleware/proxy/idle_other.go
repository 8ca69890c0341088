//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package proxy

import "net"

// quiet reports whether nothing arrived on the idle connection c; without
// a way to look without reading, it assumes so.
func quiet(net.Conn) bool { return true }
