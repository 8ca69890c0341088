package keyfetch

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/redact"
)

// hostPattern is one compiled TrustedHosts entry.
type hostPattern struct {
	host     string // exact host, or the suffix including its leading dot for a wildcard
	wildcard bool
	port     string // "" matches the scheme's default port, "*" any port
}

func parsePattern(p string) (hostPattern, error) {
	orig := p
	p = strings.ToLower(strings.TrimSpace(p))
	bad := func(why string) (hostPattern, error) {
		return hostPattern{}, fmt.Errorf("TrustedHosts entry %q: %s", orig, why)
	}
	if p == "" {
		return bad("empty")
	}
	if strings.Contains(p, "/") {
		return bad("want a host such as \"*.example.com\", \"host:port\" or \"host:*\", not a URL")
	}
	host, port := p, ""
	switch {
	case strings.HasPrefix(p, "["):
		if i := strings.LastIndex(p, "]"); i >= 0 && i < len(p)-1 {
			h, pt, err := net.SplitHostPort(p)
			if err != nil {
				return bad(err.Error())
			}
			host, port = h, pt
		} else {
			host = strings.TrimSuffix(strings.TrimPrefix(p, "["), "]")
		}
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return bad("brackets must hold an IPv6 address")
		}
	case strings.Count(p, ":") == 1:
		h, pt, err := net.SplitHostPort(p)
		if err != nil {
			return bad(err.Error())
		}
		host, port = h, pt
	case strings.Count(p, ":") > 1:
		return bad("write an IPv6 address in brackets, e.g. \"[::1]\"")
	}
	if port != "" && port != "*" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return bad("invalid port")
		}
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		if !signer.ValidHostname(rest) {
			return bad("invalid suffix after \"*.\"")
		}
		return hostPattern{host: "." + rest, wildcard: true, port: port}, nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return hostPattern{host: host, port: port}, nil
	}
	if !signer.ValidHostname(host) {
		return bad("invalid host name (a wildcard must be a leading \"*.\")")
	}
	return hostPattern{host: host, port: port}, nil
}

// match reports whether host (lowercase, no brackets) on port (effective,
// never "") matches p; defaultPort is the URL scheme's default port. isIP
// says whether host is an IP literal.
func (p hostPattern) match(host, port, defaultPort string, isIP bool) bool {
	switch p.port {
	case "*":
	case "":
		if port != defaultPort {
			return false
		}
	default:
		if p.port != port {
			return false
		}
	}
	if !p.wildcard {
		return host == p.host
	}
	return !isIP && len(host) > len(p.host) && strings.HasSuffix(host, p.host)
}

// TrustURL reports whether the trust policy lets f fetch rawURL: nil, or an
// *UntrustedError (wrapping signer.ErrUntrustedAgent) that says why not:
// a malformed URL, the scheme, a host matching no TrustedHosts pattern
// (naming the host and the patterns) and not listed by a registry. It does
// no I/O; Key, Keys and Check apply it to every URL before fetching it.
func (f *Fetcher) TrustURL(rawURL string) error {
	t, err := f.checkURL(rawURL)
	if err != nil {
		return err
	}
	for _, p := range f.cfg.patterns {
		if p.match(t.host, t.port, t.defaultPort, t.isIP) {
			return nil
		}
	}
	if f.listedByRegistry(rawURL, t) {
		return nil
	}
	hp := strings.ToLower(t.u.Host)
	if t.u.Port() == "" {
		hp = net.JoinHostPort(t.host, t.port)
	}
	listed := ""
	if len(f.regs) > 0 {
		listed = fmt.Sprintf(", and none of the %d registries lists it", len(f.regs))
	}
	return &UntrustedError{URL: rawURL, Host: strings.ToLower(t.u.Host), Reason: ReasonUntrustedHost, Patterns: f.cfg.TrustedHosts,
		reason: fmt.Sprintf("host %s matches no TrustedHosts pattern %s (an entry without a port means the scheme's default port; \"host:*\" means any port)%s", signer.Truncate(hp), patternList(f.cfg.TrustedHosts), listed)}
}

// checkedURL is a URL that passed checkURL.
type checkedURL struct {
	u                 *url.URL
	scheme            string // "https" or "http"
	host              string // lowercase, no brackets
	port, defaultPort string // port is the effective port, never ""
	isIP              bool
}

// origin returns scheme://host:port with the port always present, the
// key under which a registry trusts a host.
func (t checkedURL) origin() string {
	return t.scheme + "://" + net.JoinHostPort(t.host, t.port)
}

// checkURL applies the trust policy's rules other than the host patterns:
// an absolute http(s) URL without user information, fragment or zone, a
// valid host, and https unless AllowHTTP. It does no I/O.
func (f *Fetcher) checkURL(rawURL string) (checkedURL, error) {
	untrusted := func(format string, args ...any) error {
		return &UntrustedError{URL: rawURL, Reason: ReasonInvalidURL, reason: fmt.Sprintf(format, args...)}
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Opaque != "" || u.User != nil || u.Fragment != "" || u.Host == "" {
		return checkedURL{}, untrusted("%q is not an absolute http(s) URL without user information or fragment", signer.Truncate(redact.URL(rawURL)))
	}
	t := checkedURL{u: u, scheme: "https", defaultPort: "443"}
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "https":
	case scheme == "http" && f.cfg.AllowHTTP:
		t.scheme, t.defaultPort = "http", "80"
	case scheme == "http":
		return checkedURL{}, &UntrustedError{URL: rawURL, Host: u.Host, HTTP: true, Reason: ReasonHTTPRefused, reason: fmt.Sprintf("http scheme refused (AllowHTTP is off) for %q", signer.Truncate(redact.URL(rawURL)))}
	default:
		return checkedURL{}, untrusted("scheme %q refused", signer.Truncate(u.Scheme))
	}
	if strings.HasSuffix(u.Host, ":") {
		return checkedURL{}, untrusted("%q has an empty port", signer.Truncate(redact.URL(rawURL)))
	}
	t.host = strings.ToLower(u.Hostname())
	a, ipErr := netip.ParseAddr(t.host)
	t.isIP = ipErr == nil
	if t.isIP && a.Zone() != "" {
		return checkedURL{}, untrusted("%q: zoned addresses are refused", signer.Truncate(redact.URL(rawURL)))
	}
	if !t.isIP && !signer.ValidHostname(t.host) {
		return checkedURL{}, untrusted("%q has an invalid host name", signer.Truncate(redact.URL(rawURL)))
	}
	if t.isIP != strings.HasPrefix(u.Host, "[") && a.Is6() {
		return checkedURL{}, untrusted("%q: IPv6 must be bracketed", signer.Truncate(redact.URL(rawURL)))
	}
	t.port = cmp.Or(u.Port(), t.defaultPort)
	return t, nil
}

// patternList renders TrustedHosts for a message, at most 8 entries.
func patternList(ps []string) string {
	if len(ps) == 0 {
		return "(TrustedHosts is empty: no host is trusted)"
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, p := range ps {
		if i == 8 {
			fmt.Fprintf(&b, " …%d more", len(ps)-i)
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(signer.Truncate(p)))
	}
	b.WriteByte(']')
	return b.String()
}

// UntrustedError reports a URL the trust policy refuses (nothing was
// fetched). It wraps signer.ErrUntrustedAgent.
type UntrustedError struct {
	// URL is the URL refused.
	URL string
	// Host is its host[:port] as a TrustedHosts entry names it ("" when the
	// URL is malformed).
	Host string
	// Reason says why: ReasonInvalidURL, ReasonHTTPRefused or
	// ReasonUntrustedHost.
	Reason Reason
	// Patterns are the TrustedHosts entries none of which matched (with
	// ReasonUntrustedHost).
	Patterns []string
	// HTTP reports a plain-http URL refused because AllowHTTP is off.
	HTTP bool
	// CardJWKS reports that the URL is the jwks_uri a Signature Agent Card
	// names, not the key set the signature agent names.
	CardJWKS bool
	reason   string
}

func (e *UntrustedError) Error() string {
	return "keyfetch: " + signer.ErrUntrustedAgent.Error() + ": " + e.reason
}

// Unwrap makes errors.Is(err, signer.ErrUntrustedAgent) true.
func (e *UntrustedError) Unwrap() error { return signer.ErrUntrustedAgent }

// trustSet checks set before anything is cached or fetched for it.
func (f *Fetcher) trustSet(set signer.KeySet) error {
	switch {
	case set.IsZero():
		return fmt.Errorf("keyfetch: %w: no key set (the request has no Signature-Agent)", signer.ErrUntrustedAgent)
	case set.Kind > signer.KindCard:
		return fmt.Errorf("keyfetch: %w: unknown key-set kind %d", signer.ErrUntrustedAgent, set.Kind)
	}
	return f.TrustURL(set.URL)
}
