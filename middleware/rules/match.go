package rules

import (
	"path"
	"strings"

	"github.com/agentid/agentid/middleware"
)

// matcher is a middleware.Policy compiled for lookups that cost the same
// with ten names or ten thousand: identities, hosts and uids are map
// lookups; "*.suffix" hosts are one map lookup per label of the agent's
// host; only uid patterns with wildcards are tried one by one.
//
// An allow list compares identities exactly (PolicyIdentity.Exact: only
// the key set it names gets in). A deny list compares what the agent's
// owner cannot vary at will: an origin denies every key set on its host
// (any scheme, port, path, query or type), a key-set URL its host and
// path (any query, trailing slash or type); an agent of a configured
// service is denied by its uid, whatever form names its key set.
type matcher struct {
	services    middleware.Services
	deny        bool
	ids         map[string]struct{} // allow: PolicyIdentity.Exact
	denyHosts   map[string]struct{} // deny: hosts of origins
	denyPaths   map[string]struct{} // deny: host + path of key-set URLs
	hosts       map[string]struct{} // lowercase exact hosts
	suffixes    map[string]struct{} // lowercase, without "*."
	uids        map[string]struct{}
	uidPatterns []string
	empty       bool
}

func compile(p middleware.Policy, deny bool) (*matcher, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	svc, _ := middleware.ParseServices(p.Services)
	m := &matcher{services: svc, deny: deny, ids: map[string]struct{}{}, denyHosts: map[string]struct{}{}, denyPaths: map[string]struct{}{},
		hosts: map[string]struct{}{}, suffixes: map[string]struct{}{}, uids: map[string]struct{}{}}
	for _, id := range p.Identities {
		pid, _ := svc.ParseIdentity(id) // Validate parsed it
		switch {
		case !deny:
			m.ids[pid.Exact()] = struct{}{}
		case pid.Path == "" || pid.UID != "":
			if pid.UID != "" {
				m.uids[pid.UID] = struct{}{}
			}
			m.denyHosts[pid.Host] = struct{}{}
		default:
			m.denyPaths[pid.Host+pid.Path] = struct{}{}
		}
	}
	for _, h := range p.Hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if s, ok := strings.CutPrefix(h, "*."); ok {
			m.suffixes[s] = struct{}{}
			continue
		}
		m.hosts[h] = struct{}{}
	}
	for _, u := range p.UIDs {
		if strings.ContainsAny(u, `*?[\`) {
			m.uidPatterns = append(m.uidPatterns, u)
		} else {
			m.uids[u] = struct{}{}
		}
	}
	m.empty = len(m.ids)+len(m.denyHosts)+len(m.denyPaths)+len(m.hosts)+len(m.suffixes)+len(m.uids)+len(m.uidPatterns) == 0
	return m, nil
}

// matches reports whether agent a, whose policy identity is id, is on the
// list.
func (m *matcher) matches(id middleware.PolicyIdentity) bool {
	if m.empty || id.Origin == "" {
		return false
	}
	if m.deny {
		if _, ok := m.denyHosts[id.Host]; ok {
			return true
		}
		if id.Path != "" {
			if _, ok := m.denyPaths[id.Host+id.Path]; ok {
				return true
			}
		}
	} else if len(m.ids) > 0 {
		if _, ok := m.ids[id.Exact()]; ok {
			return true
		}
	}
	if host := id.Host; len(m.hosts) > 0 || len(m.suffixes) > 0 {
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
	if id.UID != "" {
		if _, ok := m.uids[id.UID]; ok {
			return true
		}
		for _, p := range m.uidPatterns {
			if ok, _ := path.Match(p, id.UID); ok {
				return true
			}
		}
	}
	return false
}
