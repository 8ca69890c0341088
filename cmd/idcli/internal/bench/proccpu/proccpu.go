// Package proccpu reads, from Linux's /proc, the CPU time a server process
// and the PostgreSQL processes serving it use: the load generator's (idcli
// bench) and idcli's CPU benchmarks' probe of a server on the same host.
//
//	p, err := proccpu.Listening(3000) // the process listening on port 3000
//	before, err := p.Snapshot()
//	// … load …
//	use, err := p.Since(before) // use.Server, use.Database
package proccpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The server under load is the process that listens on the port the load
// generator dials (found by the listening socket's inode in
// /proc/net/tcp{,6} and the process holding that socket), and the
// PostgreSQL backends that serve the server's own TCP connections to its
// database (matched by the client port PostgreSQL shows in each backend's
// command line), plus PostgreSQL's background processes (WAL writer,
// checkpointer, …) while the server has such a backend.

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture (the kernel converts to it for user
// space whatever its internal HZ).
const clockTicks = 100

// procFS reads CPU figures from a /proc tree.
type procFS struct {
	root string // "/proc"
}

// pidCPU returns the user+system CPU time of process pid (all its threads).
func (p procFS) pidCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and
// may hold spaces and parentheses itself, so fields are counted from the
// last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no command name")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, errors.New("proc stat: too few fields")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("proc stat: utime or stime is not a number")
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// tcpSocket is one line of /proc/net/tcp or tcp6.
type tcpSocket struct {
	localPort int
	state     int // 0x0A: listening, 0x01: established
	inode     uint64
}

const (
	tcpEstablished = 0x01
	tcpListen      = 0x0A
)

// tcpSockets returns the sockets of /proc/net/tcp and tcp6.
func (p procFS) tcpSockets() ([]tcpSocket, error) {
	var out []tcpSocket
	found := false
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join(p.root, "net", name))
		if err != nil {
			continue
		}
		found = true
		out = append(out, parseTCPTable(b)...)
	}
	if !found {
		return nil, errors.New("no " + filepath.Join(p.root, "net", "tcp"))
	}
	return out, nil
}

// parseTCPTable parses the lines of /proc/net/tcp{,6} after the header:
// "sl local_address rem_address st … uid timeout inode …".
func parseTCPTable(b []byte) []tcpSocket {
	var out []tcpSocket
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		_, port, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		lp, err1 := strconv.ParseUint(port, 16, 16)
		st, err2 := strconv.ParseUint(f[3], 16, 8)
		ino, err3 := strconv.ParseUint(f[9], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, tcpSocket{localPort: int(lp), state: int(st), inode: ino})
	}
	return out
}

// pids returns the numeric entries of the /proc tree.
func (p procFS) pids() []int {
	ents, _ := os.ReadDir(p.root)
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// socketInodes returns the inodes of the sockets process pid holds open
// (reading another user's process needs the same user or root).
func (p procFS) socketInodes(pid int) map[uint64]bool {
	dir := filepath.Join(p.root, strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[uint64]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if s, ok := strings.CutPrefix(l, "socket:["); ok {
			if ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				out[ino] = true
			}
		}
	}
	return out
}

// listenerPID returns the process listening on TCP port (any address).
func (p procFS) listenerPID(port int) (int, error) {
	socks, err := p.tcpSockets()
	if err != nil {
		return 0, err
	}
	inodes := map[uint64]bool{}
	for _, s := range socks {
		if s.state == tcpListen && s.localPort == port && s.inode != 0 {
			inodes[s.inode] = true
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing on this host listens on port %d", port)
	}
	for _, pid := range p.pids() {
		for ino := range p.socketInodes(pid) {
			if inodes[ino] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("port %d listens on this host, but its process is not readable here (another user's: run bench as that user or root)", port)
}

// clientPorts returns the local ports of pid's established TCP connections.
func (p procFS) clientPorts(pid int) map[int]bool {
	mine := p.socketInodes(pid)
	socks, _ := p.tcpSockets()
	out := map[int]bool{}
	for _, s := range socks {
		if s.state == tcpEstablished && mine[s.inode] {
			out[s.localPort] = true
		}
	}
	return out
}

// pgProcess is a PostgreSQL process: a backend serving a TCP client (with
// that client's port) or a background process (clientPort 0).
type pgProcess struct {
	pid        int
	clientPort int
}

// postgresProcesses returns the processes named postgres, but for the
// postmaster and the backends of Unix-socket clients. A backend's command
// line is "postgres: [cluster: ]user database host(port) activity".
func (p procFS) postgresProcesses() []pgProcess {
	var out []pgProcess
	for _, pid := range p.pids() {
		comm, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		title := string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
		if !strings.HasPrefix(title, "postgres:") || strings.Contains(title, "[local]") {
			continue // the postmaster, or a Unix-socket client's backend
		}
		out = append(out, pgProcess{pid: pid, clientPort: backendClientPort(title)})
	}
	return out
}

// backendClientPort returns the port in a backend's "host(port)", or 0.
func backendClientPort(title string) int {
	for rest := title; ; {
		i := strings.IndexByte(rest, '(')
		if i < 0 {
			return 0
		}
		rest = rest[i+1:]
		j := strings.IndexByte(rest, ')')
		if j < 0 {
			return 0
		}
		if n, err := strconv.Atoi(rest[:j]); err == nil && n > 0 && n < 65536 {
			return n
		}
	}
}

// Probe measures one server process and its database's CPU.
type Probe struct {
	fs  procFS
	pid int
}

// Listening returns a probe of the process of this host listening on TCP
// port (any address), or why there is none.
func Listening(port int) (*Probe, error) {
	fs := procFS{root: "/proc"}
	pid, err := fs.listenerPID(port)
	if err != nil {
		return nil, err
	}
	return &Probe{fs: fs, pid: pid}, nil
}

// PID returns the process the probe measures.
func (c *Probe) PID() int { return c.pid }

// Snapshot is the CPU used so far by the server and by every PostgreSQL
// process.
type Snapshot struct {
	server   time.Duration
	postgres map[int]time.Duration
}

// Snapshot reads the CPU used so far, for Since.
func (c *Probe) Snapshot() (Snapshot, error) {
	s, err := c.fs.pidCPU(c.pid)
	if err != nil {
		return Snapshot{}, fmt.Errorf("server process %d: %w", c.pid, err)
	}
	snap := Snapshot{server: s, postgres: map[int]time.Duration{}}
	for _, pg := range c.fs.postgresProcesses() {
		if d, err := c.fs.pidCPU(pg.pid); err == nil {
			snap.postgres[pg.pid] = d
		}
	}
	return snap, nil
}

// Use is the CPU a run used.
type Use struct {
	Server     time.Duration
	Database   time.Duration // backends and background together
	Background time.Duration // of which PostgreSQL's background processes
	Backends   int           // the server's PostgreSQL backends at the end
}

// Since returns the CPU used from before until now: the server's, and that
// of the PostgreSQL backends serving the server's connections now (a
// backend opened during the run counts whole) plus PostgreSQL's background
// processes (only if the server has a backend: a server on SQLite has no
// database CPU of its own).
func (c *Probe) Since(before Snapshot) (Use, error) {
	after, err := c.Snapshot()
	if err != nil {
		return Use{}, err
	}
	use := Use{Server: after.server - before.server}
	ports := c.fs.clientPorts(c.pid)
	var background time.Duration
	for _, pg := range c.fs.postgresProcesses() {
		d, ok := after.postgres[pg.pid]
		if !ok {
			continue
		}
		d -= before.postgres[pg.pid]
		switch {
		case pg.clientPort == 0:
			background += d
		case ports[pg.clientPort]:
			use.Database += d
			use.Backends++
		}
	}
	if use.Backends > 0 {
		use.Database += background
		use.Background = background
	}
	return use, nil
}
