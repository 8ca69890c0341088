package policy

import (
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// Matcher is a List compiled, once, for per-request decisions: identities,
// exact hosts, "*.suffix" hosts and uids without wildcards are map lookups
// (one per label of the agent's host for the suffixes), so a decision
// costs the same with ten names or ten thousand; only uid patterns with
// wildcards are tried one by one. It is safe for concurrent use.
type Matcher struct {
	services Services
	deny     bool
	ids      map[string]struct{} // allow: Identity.Exact
	// denyHosts are the hosts of a deny list's origins (and of its
	// agents of a service); denyPaths the host and path of its key-set
	// URLs.
	denyHosts, denyPaths map[string]struct{}
	// hosts and suffixes ("*." cut) are the ASCII host patterns,
	// lowercase; foldPatterns the others, as written; hostPatterns all of
	// them, as written, for an agent host that is not ASCII.
	hosts, suffixes            map[string]struct{}
	foldPatterns, hostPatterns []string
	uids                       map[string]struct{} // without wildcards
	uidPatterns                []string            // with wildcards
	empty                      bool
}

// Allow validates l and compiles it as an allow list: Allows lets in only
// the agents it names, and an identity lets in only the key set it names
// (Identity.Exact, query included). The lists are read once: later
// changes to l's slices are not seen.
func Allow(l List) (*Matcher, error) { return compile(l, false) }

// Deny validates l and compiles it as a deny list: Allows lets in every
// agent it does not name. Its identities name what their owner cannot
// vary at will: an origin names every key set on its host (any scheme,
// port, path, query or type), a key-set URL its host and path (any query,
// trailing slash or type), and an agent of a configured service is named
// by its uid, whatever form names its key set.
func Deny(l List) (*Matcher, error) { return compile(l, true) }

func compile(l List, deny bool) (*Matcher, error) {
	svc, err := l.check()
	if err != nil {
		return nil, err
	}
	m := &Matcher{services: svc, deny: deny}
	for _, id := range l.Identities {
		pid, _ := svc.ParseIdentity(id) // check parsed it
		switch {
		case !deny:
			setAdd(&m.ids, pid.Exact())
		case pid.Path == "" || pid.UID != "":
			if pid.UID != "" {
				setAdd(&m.uids, pid.UID)
			}
			setAdd(&m.denyHosts, pid.Host)
		default:
			setAdd(&m.denyPaths, pid.Host+pid.Path)
		}
	}
	for _, h := range l.Hosts {
		h = strings.TrimSpace(h)
		m.hostPatterns = append(m.hostPatterns, h)
		if !isASCII(h) {
			// strings.EqualFold, which hostMatches compares with, folds
			// some non-ASCII letters onto ASCII ones (U+017F ſ onto s,
			// U+212A K onto k) that no lowercase key would find.
			m.foldPatterns = append(m.foldPatterns, h)
			continue
		}
		if s, ok := strings.CutPrefix(h, "*."); ok {
			setAdd(&m.suffixes, strings.ToLower(s))
		} else {
			setAdd(&m.hosts, strings.ToLower(h))
		}
	}
	for _, u := range l.UIDs {
		if strings.ContainsAny(u, `*?[\`) {
			m.uidPatterns = append(m.uidPatterns, u)
		} else {
			// Without a special character, path.Match is string equality.
			setAdd(&m.uids, u)
		}
	}
	m.empty = m.ids == nil && m.denyHosts == nil && m.denyPaths == nil && m.hostPatterns == nil && m.uids == nil && m.uidPatterns == nil
	return m, nil
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

// Services returns the services of the list m was compiled from: Match
// wants an identity they read (Services.Identity).
func (m *Matcher) Services() Services { return m.services }

// Empty reports whether m names nobody (it was compiled from an empty
// List), such as an allow list that is not configured.
func (m *Matcher) Empty() bool { return m == nil || m.empty }

// Match reports whether the agent whose identity is id (read by
// m.Services().Identity) is on the list.
func (m *Matcher) Match(id Identity) bool {
	if m == nil || m.empty || id.Origin == "" {
		return false
	}
	if m.deny {
		if _, ok := m.denyHosts[id.Host]; ok {
			return true
		}
		if id.Path != "" && m.denyPaths != nil {
			if _, ok := m.denyPaths[id.Host+id.Path]; ok {
				return true
			}
		}
	} else if m.ids != nil {
		if _, ok := m.ids[id.Exact()]; ok {
			return true
		}
	}
	if id.Host != "" && m.hostPatterns != nil && m.hostAllowed(id.Host) {
		return true
	}
	if id.UID != "" {
		if _, ok := m.uids[id.UID]; ok {
			return true
		}
		for _, pat := range m.uidPatterns {
			if ok, _ := path.Match(pat, id.UID); ok {
				return true
			}
		}
	}
	return false
}

// hostAllowed reports whether a host pattern matches host (lowercase, as
// Identity.Host).
func (m *Matcher) hostAllowed(host string) bool {
	if !isASCII(host) {
		for _, h := range m.hostPatterns {
			if hostMatches(h, host) {
				return true
			}
		}
		return false
	}
	if _, ok := m.hosts[host]; ok {
		return true
	}
	if m.suffixes != nil {
		// hostMatches' "*.suffix": suffix follows a dot that is not the
		// host's first byte.
		for i := 1; i < len(host); i++ {
			if host[i] == '.' {
				if _, ok := m.suffixes[host[i+1:]]; ok {
					return true
				}
			}
		}
	}
	for _, h := range m.foldPatterns {
		if hostMatches(h, host) {
			return true
		}
	}
	return false
}

// Allows reports whether the verified agent a may pass: an allow list
// lets in the agents it names (an empty one nobody), a deny list the
// agents it does not name. A nil Matcher allows nobody.
func (m *Matcher) Allows(a middleware.Agent) bool {
	if m == nil {
		return false
	}
	return m.Match(m.services.Identity(a)) != m.deny
}

// Require returns next behind m: a request whose verified agent
// (middleware.AgentFrom) m does not allow — or that carries none, as the
// Optional and Observe modes let through — gets 403 forbidden. Put it
// inside the verification middleware.
func (m *Matcher) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := middleware.AgentFrom(r.Context())
		if !ok {
			middleware.WriteError(w, r, middleware.Fail(middleware.CodeForbidden, "a verified agent is required"))
			return
		}
		if !m.Allows(a) {
			middleware.WriteError(w, r, middleware.Fail(middleware.CodeForbidden, "agent %s is not allowed here", signer.Truncate(a.ID)))
			return
		}
		next.ServeHTTP(w, r)
	})
}
