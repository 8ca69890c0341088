package clitest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// TCPProxy forwards loopback connections to a target. Stop closes the
// listener and every connection (the target "goes away"); Start listens
// again on the same address.
type TCPProxy struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
	wg           sync.WaitGroup
}

// NewTCPProxy starts a proxy to target on a free loopback port, stopped when
// the test ends.
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	p := &TCPProxy{target: target, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	p.addr = p.ln.Addr().String()
	t.Cleanup(func() { p.Stop(); p.wg.Wait() })
	return p
}

// Addr is the proxy's host:port.
func (p *TCPProxy) Addr() string { return p.addr }

// Start listens (again) and forwards each connection.
func (p *TCPProxy) Start() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.pipe(c) }()
		}
	}()
	return nil
}

func (p *TCPProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *TCPProxy) pipe(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c) || !p.track(up) {
		c.Close()
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// Stop closes the listener and every open connection.
func (p *TCPProxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}
