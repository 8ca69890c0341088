// Package hint words what the user of idcli can do about an error: a hint
// line after it, the address a refused connection names, and the URL an
// address written without a scheme stands for. idcli's commands and its
// internal packages share it.
package hint

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// hintError is an error followed, on its own line, by what to do about it.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + "\nhint: " + e.hint }
func (e *hintError) Unwrap() error { return e.err }

// With returns err followed by hint, or err alone when hint is "".
func With(err error, hint string) error {
	if err == nil || hint == "" {
		return err
	}
	return &hintError{err: err, hint: hint}
}

// Refused returns a hint for err when it is a refused connection (no
// process listens at the address): it names the address dialed, taken
// from err's URL (or from fallbackURL), and the command that starts a
// server. It returns "" for any other error.
func Refused(err error, fallbackURL string) string {
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return ""
	}
	raw := fallbackURL
	var ue *url.Error
	if errors.As(err, &ue) {
		raw = ue.URL
	}
	addr := raw
	if u, perr := url.Parse(raw); perr == nil && u.Host != "" {
		addr = u.Host
		if u.Port() == "" {
			port := "443"
			if u.Scheme == "http" {
				port = "80"
			}
			addr = net.JoinHostPort(u.Hostname(), port)
		}
	}
	return "nothing is listening at " + addr + " (connection refused): start the server with idcli server start, or check the URL"
}

// Scheme names the URL that raw, when it lacks a scheme, most likely
// stands for, as " (did you mean …?)"; else "".
func Scheme(raw string) string {
	if strings.Contains(raw, "://") || raw == "" || strings.HasPrefix(raw, "/") {
		return ""
	}
	return " (did you mean " + WithScheme(raw) + "?)"
}

// WithScheme prefixes raw with http:// for a host on this machine
// (localhost, *.localhost, a loopback address) and https:// otherwise.
func WithScheme(raw string) string {
	host, _, _ := strings.Cut(raw, "/")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if IsLocalHost(strings.Trim(strings.ToLower(host), "[]")) {
		return "http://" + raw
	}
	return "https://" + raw
}

// IsLocalHost reports whether host, a lowercase host name or address
// without port or brackets, names this machine: localhost, a *.localhost
// name or a loopback address.
func IsLocalHost(host string) bool {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.IsLoopback()
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}
