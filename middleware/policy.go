package middleware

import (
	"fmt"
	"net"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/agentid/agentid/signer"
)

// Policy is an allow-list of verified agents, for API owners who accept
// only some of the agents the verifier recognises. An agent is allowed when
// any list matches it; the zero Policy allows nobody.
//
//	allow := middleware.Policy{Hosts: []string{"*.agentid.example"},
//		UIDs: []string{"agent-0123*"}, Services: []string{"https://agentid.example"}}
//	http.Handle("/", verify(allow.Require(handler)))
type Policy struct {
	// Identities are agent identities: an origin such as
	// "https://chatgpt.com", or a key-set URL. They are normalised as the
	// verifier normalises Signature-Agent and compared without the parts
	// an agent may vary at will (PolicyIdentity.Exact: a trailing slash,
	// the ;type of the member, the well-known directory path of an
	// origin); a query is kept.
	Identities []string
	// Hosts match the host of the agent's identity: an exact host, or
	// "*.suffix" matching hosts under suffix on a label boundary
	// ("*.example.com" matches "a.example.com", not "example.com" nor
	// "evilexample.com"). Case-insensitive.
	Hosts []string
	// UIDs match the uid of agents of Services with path.Match patterns:
	// an exact uid, or "agent-0123*". Agents of other hosts never match,
	// whatever the first label of their host (Services.UID).
	UIDs []string
	// Services are the base URLs of the agentid services whose agents
	// UIDs name, such as "https://agentid.example". Validate refuses UIDs
	// without Services.
	Services []string
}

// Validate reports a policy that cannot work: an identity that is not an
// origin or key-set URL, a bad host or uid pattern, a bad service URL, or
// uids without a service (a uid names an agent of a service: without one,
// any host whose first label is agent-… would match).
func (p Policy) Validate() error {
	_, err := p.compile()
	return err
}

// compile checks p and returns its services.
func (p Policy) compile() (Services, error) {
	svc, err := ParseServices(p.Services)
	if err != nil {
		return Services{}, fmt.Errorf("services: %w", err)
	}
	if len(p.UIDs) > 0 && svc.Empty() {
		return Services{}, fmt.Errorf("uids %q need the agentid service they belong to (Services, idcli proxy --agentid-service): without one any host named agent-… would match", signer.Truncate(strings.Join(p.UIDs, ",")))
	}
	for _, id := range p.Identities {
		if _, err := svc.ParseIdentity(id); err != nil {
			return Services{}, err
		}
	}
	for _, h := range p.Hosts {
		if !validHostPattern(h) {
			return Services{}, fmt.Errorf("bad host pattern %q (want an exact name or *.suffix)", signer.Truncate(h))
		}
	}
	for _, u := range p.UIDs {
		if _, err := path.Match(u, ""); err != nil {
			return Services{}, fmt.Errorf("bad uid pattern %q (want a path.Match pattern)", signer.Truncate(u))
		}
	}
	return svc, nil
}

// validHostPattern reports an exact host or "*.suffix" without other
// wildcards.
func validHostPattern(h string) bool {
	h = strings.TrimSpace(h)
	s, _ := strings.CutPrefix(h, "*.")
	return s != "" && !strings.Contains(s, "*")
}

// Allows reports whether the verified agent a is on the list. A policy
// that does not validate allows nobody. Each call compiles the lists anew
// (linear in their length), which suits a one-off check; a long-lived
// user, such as a handler deciding every request, compiles them once with
// Compile, as Require does.
func (p Policy) Allows(a Agent) bool {
	c, _ := p.Compile() // nil, which allows nobody, for a policy that does not validate
	return c.Allows(a)
}

// Compile validates p and returns its lists in the form each request is
// decided on: identities, exact hosts, "*.suffix" hosts and uids without
// wildcards are map lookups (one per label of the agent's host for the
// suffixes), so a decision costs the same with ten names or ten thousand;
// only uid patterns with wildcards are tried one by one. The lists are
// read once: later changes to p's slices are not seen.
func (p Policy) Compile() (*CompiledPolicy, error) {
	svc, err := p.compile()
	if err != nil {
		return nil, err
	}
	c := &CompiledPolicy{services: svc}
	for _, id := range p.Identities {
		pid, _ := svc.ParseIdentity(id) // compile parsed it
		setAdd(&c.identities, pid.Exact())
	}
	for _, h := range p.Hosts {
		h = strings.TrimSpace(h)
		c.hostPatterns = append(c.hostPatterns, h)
		if !isASCII(h) {
			// strings.EqualFold, which hostMatches compares with, folds
			// some non-ASCII letters onto ASCII ones (U+017F ſ onto s,
			// U+212A K onto k) that no lowercase key would find.
			c.foldPatterns = append(c.foldPatterns, h)
			continue
		}
		if s, ok := strings.CutPrefix(h, "*."); ok {
			setAdd(&c.suffixes, strings.ToLower(s))
		} else {
			setAdd(&c.hosts, strings.ToLower(h))
		}
	}
	for _, u := range p.UIDs {
		if strings.ContainsAny(u, `*?[\`) {
			c.uidPatterns = append(c.uidPatterns, u)
		} else {
			// Without a special character, path.Match is string equality.
			setAdd(&c.uids, u)
		}
	}
	return c, nil
}

// CompiledPolicy is a Policy compiled for per-request decisions
// (Policy.Compile). It is safe for concurrent use.
type CompiledPolicy struct {
	services   Services
	identities map[string]struct{} // PolicyIdentity.Exact
	// hosts and suffixes ("*." cut) are the ASCII host patterns,
	// lowercase; foldPatterns the others, as written; hostPatterns all of
	// them, as written, for an agent host that is not ASCII.
	hosts, suffixes            map[string]struct{}
	foldPatterns, hostPatterns []string
	uids                       map[string]struct{} // without wildcards
	uidPatterns                []string            // with wildcards
}

func setAdd(m *map[string]struct{}, k string) {
	if *m == nil {
		*m = map[string]struct{}{}
	}
	(*m)[k] = struct{}{}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Allows reports whether the verified agent a is on the list: the answer
// of Policy.Allows, without reading the lists again. A nil CompiledPolicy
// allows nobody.
func (c *CompiledPolicy) Allows(a Agent) bool {
	if c == nil || (a.ID == "" && a.DirectoryURL == "") {
		return false
	}
	id := c.services.Identity(a)
	if c.identities != nil {
		if exact := id.Exact(); exact != "" {
			if _, ok := c.identities[exact]; ok {
				return true
			}
		}
	}
	if id.Host != "" && c.hostPatterns != nil && c.hostAllowed(id.Host) {
		return true
	}
	if id.UID != "" {
		if _, ok := c.uids[id.UID]; ok {
			return true
		}
		for _, pat := range c.uidPatterns {
			if ok, _ := path.Match(pat, id.UID); ok {
				return true
			}
		}
	}
	return false
}

// hostAllowed reports whether a host pattern matches host (lowercase, as
// PolicyIdentity.Host).
func (c *CompiledPolicy) hostAllowed(host string) bool {
	if !isASCII(host) {
		for _, h := range c.hostPatterns {
			if hostMatches(h, host) {
				return true
			}
		}
		return false
	}
	if _, ok := c.hosts[host]; ok {
		return true
	}
	if c.suffixes != nil {
		// hostMatches' "*.suffix": suffix follows a dot that is not the
		// host's first byte.
		for i := 1; i < len(host); i++ {
			if host[i] == '.' {
				if _, ok := c.suffixes[host[i+1:]]; ok {
					return true
				}
			}
		}
	}
	for _, h := range c.foldPatterns {
		if hostMatches(h, host) {
			return true
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
	c, _ := p.Compile() // nil, which allows nobody, for a policy that does not validate
	return c.Require(next)
}

// Require is Policy.Require on the compiled lists.
func (c *CompiledPolicy) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := AgentFrom(r.Context())
		if !ok {
			WriteError(w, Fail(CodeForbidden, "a verified agent is required"))
			return
		}
		if !c.Allows(a) {
			WriteError(w, Fail(CodeForbidden, "agent %s is not allowed here", signer.Truncate(a.ID)))
			return
		}
		next.ServeHTTP(w, r)
	})
}
