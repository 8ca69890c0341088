package policy

import (
	"fmt"
	"net"
	"path"
	"strings"

	"github.com/agentid/agentid/signer"
)

// List names verified agents, for an allow or a deny list. An agent is on
// it when any of its fields names the agent; the zero List names nobody.
// Allow and Deny compile it; a List is never decided on as written.
type List struct {
	// Identities are agent identities: an origin such as
	// "https://chatgpt.com", or a key-set URL. They are normalised as the
	// verifier normalises Signature-Agent. An allow list compares them
	// without the parts an agent may vary at will (Identity.Exact: a
	// trailing slash, the ;type of the member, the well-known directory
	// path of an origin; a query is kept); a deny list by what their owner
	// cannot vary (Deny).
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

// Validate reports a list that cannot work: an identity that is not an
// origin or key-set URL, a bad host or uid pattern, a bad service URL, or
// uids without a service (a uid names an agent of a service: without one,
// any host whose first label is agent-… would match).
func (l List) Validate() error {
	_, err := l.check()
	return err
}

// check validates l and returns its services.
func (l List) check() (Services, error) {
	svc, err := ParseServices(l.Services)
	if err != nil {
		return Services{}, fmt.Errorf("services: %w", err)
	}
	if len(l.UIDs) > 0 && svc.Empty() {
		return Services{}, fmt.Errorf("uids %q need the agentid service they belong to (Services, idcli proxy --agentid-service): without one any host named agent-… would match", signer.Truncate(strings.Join(l.UIDs, ",")))
	}
	for _, id := range l.Identities {
		if _, err := svc.ParseIdentity(id); err != nil {
			return Services{}, err
		}
	}
	for _, h := range l.Hosts {
		if !validHostPattern(h) {
			return Services{}, fmt.Errorf("bad host pattern %q (want an exact name or *.suffix)", signer.Truncate(h))
		}
	}
	for _, u := range l.UIDs {
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

// hostOf returns the host of an agent identity (an origin or a key-set
// URL, as the verifier built it): no brackets, no port, "" when id has no
// scheme.
func hostOf(id string) string {
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
