package policy

import (
	"github.com/agentid/agentid/middleware"
	"path"
	"strings"
)

// ReferenceAllows decides as an allow list compiled from p (Allow) by
// reading the lists one entry at a time, as written (the decision before
// lists were compiled): the oracle the compiled decision is checked
// against.
func ReferenceAllows(p List, a middleware.Agent) bool {
	svc, err := p.check()
	if err != nil || (a.ID == "" && a.DirectoryURL == "") {
		return false
	}
	id := svc.Identity(a)
	if exact := id.Exact(); exact != "" {
		for _, e := range p.Identities {
			if pe, err := svc.ParseIdentity(e); err == nil && pe.Exact() == exact {
				return true
			}
		}
	}
	if id.Host != "" {
		for _, h := range p.Hosts {
			if hostMatches(strings.TrimSpace(h), id.Host) {
				return true
			}
		}
	}
	if id.UID != "" {
		for _, pat := range p.UIDs {
			if ok, _ := path.Match(pat, id.UID); ok {
				return true
			}
		}
	}
	return false
}
