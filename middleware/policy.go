package middleware

import (
	"net"
	"net/http"
	"path"
	"strings"

	"github.com/agentid/agentid/signer"
)

// Policy is an allow-list of verified agents, for API owners who accept
// only some of the agents the verifier recognises. An agent is allowed when
// any list matches it; the zero Policy allows nobody.
//
//	allow := middleware.Policy{Hosts: []string{"*.agentid.example"}, UIDs: []string{"agent-0123*"}}
//	http.Handle("/", verify(allow.Require(handler)))
type Policy struct {
	// Identities are exact agent identities (Agent.ID): an origin such as
	// "https://chatgpt.com", or a key-set URL.
	Identities []string
	// Hosts match the host of the agent's identity: an exact host, or
	// "*.suffix" matching hosts under suffix on a label boundary
	// ("*.example.com" matches "a.example.com", not "example.com" nor
	// "evilexample.com"). Case-insensitive.
	Hosts []string
	// UIDs match Agent.UID (agents of an agentid service) with path.Match
	// patterns: an exact uid, or "agent-0123*".
	UIDs []string
}

// Allows reports whether the verified agent a is on the list.
func (p Policy) Allows(a Agent) bool {
	if a.ID == "" && a.UID == "" {
		return false
	}
	for _, id := range p.Identities {
		if id == a.ID {
			return true
		}
	}
	if host := IdentityHost(a.ID); host != "" {
		for _, h := range p.Hosts {
			if hostMatches(h, host) {
				return true
			}
		}
	}
	if a.UID != "" {
		for _, pat := range p.UIDs {
			if ok, _ := path.Match(pat, a.UID); ok {
				return true
			}
		}
	}
	return false
}

// IdentityHost returns the host of an agent identity (Agent.ID: an origin
// or a key-set URL, as the verifier built it): no brackets, no port, ""
// when id has no scheme. Policies and the proxy's rules match host
// patterns against it.
func IdentityHost(id string) string {
	_, rest, ok := strings.Cut(id, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if h, _, err := net.SplitHostPort(rest); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(rest, "["), "]")
}

// hostMatches compares case-insensitively: pattern is a host or
// "*.suffix", matching hosts under suffix on a label boundary.
func hostMatches(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		n := len(host) - len(suffix)
		return n > 1 && host[n-1] == '.' && strings.EqualFold(host[n:], suffix)
	}
	return strings.EqualFold(pattern, host)
}

// Require returns next behind the policy: a request whose verified agent
// (AgentFrom) is not allowed — or that carries none, as Optional and
// Observe modes let through — gets 403 forbidden. Put it inside the
// verification middleware.
func (p Policy) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := AgentFrom(r.Context())
		if !ok {
			WriteError(w, Fail(CodeForbidden, "a verified agent is required"))
			return
		}
		if !p.Allows(a) {
			WriteError(w, Fail(CodeForbidden, "agent %s is not allowed here", signer.Truncate(a.ID)))
			return
		}
		next.ServeHTTP(w, r)
	})
}
