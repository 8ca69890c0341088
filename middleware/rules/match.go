package rules

import (
	"path"
	"strings"

	"github.com/agentid/agentid/middleware"
)

// matcher is a middleware.Policy compiled for lookups that cost the same
// with ten names or ten thousand: exact identities, hosts and uids are map
// lookups; "*.suffix" hosts are one map lookup per label of the agent's
// host; only uid patterns with wildcards are tried one by one.
type matcher struct {
	ids         map[string]struct{}
	hosts       map[string]struct{} // lowercase exact hosts
	suffixes    map[string]struct{} // lowercase, without "*."
	uids        map[string]struct{}
	uidPatterns []string
	empty       bool
}

func compile(p middleware.Policy) (*matcher, error) {
	m := &matcher{ids: map[string]struct{}{}, hosts: map[string]struct{}{}, suffixes: map[string]struct{}{}, uids: map[string]struct{}{}}
	for _, id := range p.Identities {
		m.ids[id] = struct{}{}
	}
	for _, h := range p.Hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if s, ok := strings.CutPrefix(h, "*."); ok {
			if s == "" || strings.Contains(s, "*") {
				return nil, &patternError{"host", h}
			}
			m.suffixes[s] = struct{}{}
			continue
		}
		if h == "" || strings.Contains(h, "*") {
			return nil, &patternError{"host", h}
		}
		m.hosts[h] = struct{}{}
	}
	for _, u := range p.UIDs {
		if _, err := path.Match(u, ""); err != nil {
			return nil, &patternError{"uid", u}
		}
		if strings.ContainsAny(u, `*?[\`) {
			m.uidPatterns = append(m.uidPatterns, u)
		} else {
			m.uids[u] = struct{}{}
		}
	}
	m.empty = len(m.ids)+len(m.hosts)+len(m.suffixes)+len(m.uids)+len(m.uidPatterns) == 0
	return m, nil
}

type patternError struct{ kind, pattern string }

func (e *patternError) Error() string {
	return "bad " + e.kind + " pattern " + `"` + e.pattern + `"` + " (want an exact name or *.suffix for hosts, a path.Match pattern for uids)"
}

// matches reports whether agent a is on the list (Policy.Allows's rules).
func (m *matcher) matches(a middleware.Agent) bool {
	if m.empty || (a.ID == "" && a.UID == "") {
		return false
	}
	if _, ok := m.ids[a.ID]; ok {
		return true
	}
	if host := middleware.IdentityHost(a.ID); host != "" && (len(m.hosts) > 0 || len(m.suffixes) > 0) {
		host = strings.ToLower(host)
		if _, ok := m.hosts[host]; ok {
			return true
		}
		for i := 0; i < len(host); i++ {
			if host[i] == '.' && i > 0 {
				if _, ok := m.suffixes[host[i+1:]]; ok {
					return true
				}
			}
		}
	}
	if a.UID != "" {
		if _, ok := m.uids[a.UID]; ok {
			return true
		}
		for _, p := range m.uidPatterns {
			if ok, _ := path.Match(p, a.UID); ok {
				return true
			}
		}
	}
	return false
}
