package middleware

import (
	"net/http"
	"net/url"
	"path"
	"strings"
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
	if len(p.Hosts) > 0 && a.ID != "" {
		if u, err := url.Parse(a.ID); err == nil {
			host := strings.ToLower(u.Hostname())
			for _, h := range p.Hosts {
				if hostMatches(strings.ToLower(h), host) {
					return true
				}
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

func hostMatches(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return len(host) > len(suffix)+1 && strings.HasSuffix(host, "."+suffix)
	}
	return pattern == host
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
			WriteError(w, Fail(CodeForbidden, "agent %s is not allowed here", truncate(a.ID)))
			return
		}
		next.ServeHTTP(w, r)
	})
}
