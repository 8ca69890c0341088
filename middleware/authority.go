package middleware

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/agentid/agentid/signer"
)

// authority is one Config.Authorities entry: a host (or "*.suffix") and
// its port ("" for the scheme's default port).
type authority struct {
	host     string // lowercase; for a wildcard, ".suffix"
	wildcard bool
	port     string
}

// parseAuthorities validates Config.Authorities.
func parseAuthorities(list []string) ([]authority, error) {
	out := make([]authority, 0, len(list))
	for _, s := range list {
		a, err := parseAuthorityEntry(s)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func parseAuthorityEntry(s string) (authority, error) {
	bad := func(why string) (authority, error) {
		return authority{}, fmt.Errorf("middleware: Config.Authorities: %q %s", s, why)
	}
	e := strings.ToLower(strings.TrimSpace(s))
	if e == "" {
		return bad("is empty")
	}
	if strings.Contains(e, "://") || strings.ContainsAny(e, "/?#@") {
		return bad("is not host or host:port (no scheme, path or user information)")
	}
	var a authority
	if rest, ok := strings.CutPrefix(e, "*."); ok {
		a.wildcard = true
		e = rest
	}
	if !signer.ValidAuthority(e) {
		return bad("is not host or host:port")
	}
	a.host, a.port = splitHostPort(e)
	if strings.HasPrefix(a.port, "0") {
		return bad("has an invalid port")
	}
	if a.wildcard {
		if strings.HasPrefix(a.host, "[") {
			return bad("puts a wildcard on an IP address")
		}
		a.host = "." + a.host
	}
	return a, nil
}

// splitHostPort splits an authority already validated by
// signer.ValidAuthority ("host", "host:port", "[v6]" or "[v6]:port").
func splitHostPort(a string) (host, port string) {
	i := strings.LastIndexByte(a, ':')
	if i < 0 || strings.HasSuffix(a, "]") {
		return a, ""
	}
	return a[:i], a[i+1:]
}

// defaultPort returns the default port of scheme.
func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// match reports whether the authority host:port (port "" meaning the
// scheme's default) is this entry.
func (a *authority) match(host, port, scheme string) bool {
	want := a.port
	if want == "" {
		want = defaultPort(scheme)
	}
	if port == "" {
		port = defaultPort(scheme)
	}
	if port != want {
		return false
	}
	if a.wildcard {
		// A label boundary: at least one label before ".suffix".
		return len(host) > len(a.host) && strings.HasSuffix(host, a.host)
	}
	return host == a.host
}

// checkAuthority refuses, with 421 misdirected_request, a signed request
// whose authority is not one the verifier serves. The authority is what
// @authority and @target-uri cover: the Host (for an absolute-form request
// target, the target's host, which net/http puts in r.Host) and, when
// set, the URL's host. It runs before any key lookup or signature check.
func (v *Verifier) checkAuthority(r *http.Request) *Error {
	if v.cfg.AnyAuthority {
		return nil
	}
	if len(v.authorities) == 0 {
		return Fail(CodeMisdirectedRequest, "this verifier serves no authority: set middleware.Config.Authorities to the hosts it serves (or Config.AnyAuthority when something in front already pins the host)")
	}
	scheme := signer.Scheme(r)
	if err := v.servesHost(r.Host, scheme); err != nil {
		return err
	}
	if r.URL != nil && r.URL.Host != "" && !strings.EqualFold(r.URL.Host, r.Host) {
		return v.servesHost(r.URL.Host, scheme)
	}
	return nil
}

func (v *Verifier) servesHost(h, scheme string) *Error {
	a, err := signer.ParseAuthority(scheme, h)
	if err != nil {
		return signerError(err)
	}
	host, port := splitHostPort(a)
	for i := range v.authorities {
		if v.authorities[i].match(host, port, scheme) {
			return nil
		}
	}
	return Fail(CodeMisdirectedRequest, "this verifier does not serve %q: a signature made for another host is refused", signer.Truncate(a))
}
