package keyfetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/redact"
)

// ErrPrivateAddress is wrapped by the fetch error when a key-set host
// resolves to a loopback, private, link-local or otherwise non-public address
// and Config.AllowPrivateNetworks is off.
var ErrPrivateAddress = errors.New("keyfetch: refusing to connect to a non-public address")

// blockedPrefixes are the ranges refused at dial time unless
// AllowPrivateNetworks is set. IPv4-mapped IPv6 addresses are unmapped before
// the check; NAT64 addresses are checked by their embedded IPv4 address.
var blockedPrefixes = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this network", includes the unspecified address
		"10.0.0.0/8",      // RFC 1918
		"100.64.0.0/10",   // shared address space (CGNAT), RFC 6598
		"127.0.0.0/8",     // loopback
		"169.254.0.0/16",  // link-local (cloud metadata lives here)
		"172.16.0.0/12",   // RFC 1918
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // TEST-NET-1
		"192.168.0.0/16",  // RFC 1918
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // TEST-NET-2
		"203.0.113.0/24",  // TEST-NET-3
		"224.0.0.0/4",     // multicast
		"240.0.0.0/4",     // reserved, includes broadcast
		"::/128",          // unspecified
		"::1/128",         // loopback
		"::/96",           // IPv4-compatible (deprecated)
		"100::/64",        // discard-only
		"2001:db8::/32",   // documentation
		"fc00::/7",        // unique local
		"fe80::/10",       // link-local
		"fec0::/10",       // site-local (deprecated)
		"ff00::/8",        // multicast
		"2002::/16",       // 6to4 may tunnel to any IPv4 address
		"2001::/32",       // Teredo
		"64:ff9b:1::/48",  // local-use NAT64
		"::ffff:0:0:0/96", // IPv4-translated
		"64:ff9b::/96",    // well-known NAT64: checked via its IPv4 below, then refused if private
		"2001:10::/28",    // ORCHID
		"2001:20::/28",    // ORCHIDv2
		"3fff::/20",       // documentation (RFC 9637)
		"5f00::/16",       // segment routing SIDs
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// publicAddr reports whether a may be dialed when private networks are not
// allowed.
func publicAddr(a netip.Addr) bool {
	a = a.WithZone("")
	if !a.IsValid() {
		return false
	}
	a = a.Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		return publicAddr(netip.AddrFrom4([4]byte(b[12:])))
	}
	if a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() || a.IsMulticast() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// dialControl refuses non-public addresses. It runs for every address the
// dialer tries, after name resolution.
func dialControl(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrPrivateAddress, address, err)
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !publicAddr(a) {
		return fmt.Errorf("%w: %s (AllowPrivateNetworks is off)", ErrPrivateAddress, host)
	}
	return nil
}

// isLocalhost reports whether host is "localhost" or a name under
// ".localhost", which RFC 6761 §6.3 reserves for loopback.
func isLocalhost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// localDialer dials through d, except that it answers the loopback names
// itself (isLocalhost) instead of asking the system resolver, which may not
// know *.localhost: 127.0.0.1, then ::1 if that fails. Without
// allowPrivate such names are refused before any resolution or connection.
type localDialer struct {
	d            *net.Dialer
	allowPrivate bool
}

func (l localDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !isLocalhost(host) {
		return l.d.DialContext(ctx, network, addr)
	}
	if !l.allowPrivate {
		return nil, fmt.Errorf("%w: %s is a loopback name (RFC 6761; AllowPrivateNetworks is off)", ErrPrivateAddress, host)
	}
	c, err := l.d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	if err == nil || ctx.Err() != nil {
		return c, err
	}
	if c6, err6 := l.d.DialContext(ctx, network, net.JoinHostPort("::1", port)); err6 == nil {
		return c6, nil
	}
	return nil, err
}

// NewClient returns the HTTP client keyfetch fetches key sets with, for
// any other request a server makes to a URL someone else chose (a webhook,
// a callback): no proxy (one would be dialed instead of the host), no
// redirect followed (the first answer is returned as it is), timeout on
// the dial, the TLS handshake and the wait for the answer's header (the
// caller bounds the body's read with its context), 64 KiB of header at
// most. Unless allowPrivate, every address the dialer is about to connect
// to, after name resolution, must be public: a loopback, private,
// link-local, multicast, reserved or NAT64/6to4 form of one is refused
// with an error wrapping ErrPrivateAddress, before any byte is sent, and
// so are "localhost" and the names under ".localhost" (RFC 6761), which
// the client resolves to loopback itself when allowPrivate is set.
func NewClient(allowPrivate bool, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = dialControl
	}
	t := &http.Transport{
		Proxy:                  nil, // a proxy would be dialed instead of the key-set host
		DialContext:            localDialer{d: d, allowPrivate: allowPrivate}.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{Transport: t, CheckRedirect: noRedirect}
}

// CheckDestination reports, without I/O, whether a server may send
// requests to rawURL under the rules NewClient applies when dialing, so
// that a configured URL (a webhook) is refused at startup with a clear
// error rather than at each attempt: an absolute URL without user
// information or fragment, a valid host, https (http only with
// allowPrivate, which is for local development), and, unless
// allowPrivate, a host that is neither a non-public IP literal nor a
// loopback name (errors wrapping ErrPrivateAddress). A host name passing
// here may still resolve to a private address: NewClient refuses that at
// dial time. Errors name the URL by redact.HostOnly: such a URL (a
// Slack or Discord webhook) may carry its secret in the path.
func CheckDestination(rawURL string, allowPrivate bool) error {
	shown := signer.Truncate(redact.HostOnly(rawURL))
	u, err := url.Parse(rawURL)
	if err != nil || u.Opaque != "" || u.User != nil || u.Fragment != "" || u.Host == "" || strings.HasSuffix(u.Host, ":") {
		return fmt.Errorf("keyfetch: %q is not an absolute https URL without user information, fragment or empty port", shown)
	}
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "https":
	case scheme == "http" && allowPrivate:
	case scheme == "http":
		return fmt.Errorf("keyfetch: %q: plain http is refused (https is required unless private networks are allowed, for local development)", shown)
	default:
		return fmt.Errorf("keyfetch: %q: scheme %q refused, want https", shown, signer.Truncate(u.Scheme))
	}
	host := strings.ToLower(u.Hostname())
	a, ipErr := netip.ParseAddr(host)
	switch {
	case ipErr == nil && a.Zone() != "":
		return fmt.Errorf("keyfetch: %q: zoned addresses are refused", shown)
	case ipErr == nil && a.Is6() != strings.HasPrefix(u.Host, "["):
		return fmt.Errorf("keyfetch: %q: IPv6 must be bracketed", shown)
	case ipErr != nil && !signer.ValidHostname(host):
		return fmt.Errorf("keyfetch: %q has an invalid host name", shown)
	case allowPrivate:
	case ipErr == nil && !publicAddr(a):
		return fmt.Errorf("%w: %q: %s is not a public address (private networks are not allowed)", ErrPrivateAddress, shown, a)
	case isLocalhost(host):
		return fmt.Errorf("%w: %q: %s is a loopback name (private networks are not allowed)", ErrPrivateAddress, shown, host)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("keyfetch: %q: invalid port", shown)
		}
	}
	return nil
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
