package policy

import (
	"fmt"
	"strings"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// Services are the agentid services an API owner knows: their agents are
// known by their uid, whatever Signature-Agent form named their key set.
// The zero Services knows none. It is safe for concurrent use.
type Services struct {
	list []signer.ServiceURL
}

// ParseServices reads base URLs of agentid services, such as
// "https://agentid.example" (signer.ParseServiceURL).
func ParseServices(urls []string) (Services, error) {
	var s Services
	for _, u := range urls {
		su, err := signer.ParseServiceURL(u)
		if err != nil {
			return Services{}, err
		}
		s.list = append(s.list, su)
	}
	return s, nil
}

// Empty reports whether s names no service.
func (s Services) Empty() bool { return len(s.list) == 0 }

// UID returns the uid of a when its key set is on the agent host
// <uid>.<service host[:port]> of one of the services (any scheme, path,
// query or key-set type: that host is the service's, which serves each
// agent's keys only there), else "". Agent.UID, which takes the first
// label of any host, is not used: agent-….other.example is another owner's
// agent.
func (s Services) UID(a middleware.Agent) string {
	if len(s.list) == 0 {
		return ""
	}
	return s.Identity(a).UID
}

// Identity is a verified agent's identity as allow lists, deny
// lists and budgets read it: the parts its owner can vary at will (a
// query, a trailing slash, the ;type of the member, a respelling the
// verifier already normalises) are gone. docs/signature-agent.md has the
// table of Signature-Agent forms.
type Identity struct {
	// UID is set for an agent of a configured service (Services.UID); the
	// other fields are then still filled in.
	UID string
	// Origin is scheme://host[:port] of the key set.
	Origin string
	// Host is the key set's host, lowercase, without port or brackets.
	Host string
	// Path is the key set's path without its query or trailing slashes,
	// "" for the origin's well-known directory.
	Path string
	// Query is the key set's query ("" for none).
	Query string
	// exact caches Exact when it is a substring of the key-set URL.
	exact string
	// Thumbprint is the RFC 7638 thumbprint of the key that verified.
	Thumbprint string
}

// Identity returns the policy identity of the verified agent a.
func (s Services) Identity(a middleware.Agent) Identity {
	p := splitIdentity(a.DirectoryURL)
	if p.Origin == "" && a.ID != "" {
		// An Agent built without its key-set URL (by a KeySource or a
		// test): read its identity.
		if ks, err := signer.ParseKeySetURL(a.ID); err == nil {
			p = splitIdentity(ks.URL)
		}
	}
	p.Thumbprint = a.Thumbprint
	p.UID = s.uidOf(p)
	return p
}

// ParseIdentity reads an identity written in a policy (an origin, or a
// key-set URL; normalised as the verifier normalises Signature-Agent).
func (s Services) ParseIdentity(id string) (Identity, error) {
	ks, err := signer.ParseKeySetURL(strings.TrimSpace(id))
	if err != nil {
		return Identity{}, fmt.Errorf("identity %q: %w", signer.Truncate(id), err)
	}
	p := splitIdentity(ks.URL)
	p.UID = s.uidOf(p)
	return p, nil
}

func (s Services) uidOf(p Identity) string {
	if len(s.list) == 0 || p.Origin == "" {
		return ""
	}
	_, host, _ := strings.Cut(p.Origin, "://")
	for _, su := range s.list {
		if uid := su.UIDOfHost(host); uid != "" {
			return uid
		}
	}
	return ""
}

// Exact returns the identity allow lists compare: the origin, path and
// query (the well-known directory without a query is the origin). The
// query is kept: an allow list lets in only the key set it names, and a
// host may serve another owner's keys under another query; a respelling
// with a query is then refused, which harms nobody but its sender.
func (p Identity) Exact() string {
	switch {
	case p.exact != "":
		return p.exact
	case p.Origin == "":
		return ""
	case p.Query == "":
		return p.Origin + p.Path
	case p.Path == "":
		return p.Origin + signer.DirectoryPath + "?" + p.Query
	}
	return p.Origin + p.Path + "?" + p.Query
}

// Budget returns the name a verified agent's budget is kept under: "uid "
// and the uid for an agent of a configured service, else "host " and the
// key set's host (its owner serves any path, query, port or key-set type
// there at will), else, for an agent without a key set, "key " and the
// thumbprint.
func (p Identity) Budget() string {
	kind, name := p.budget()
	return kind + name
}

// AppendBudget appends Budget's name to dst and returns the result, for a
// caller that builds a longer key around it in one buffer.
func (p Identity) AppendBudget(dst []byte) []byte {
	kind, name := p.budget()
	return append(append(dst, kind...), name...)
}

// budget returns the two parts of Budget's name.
func (p Identity) budget() (kind, name string) {
	switch {
	case p.UID != "":
		return "uid ", p.UID
	case p.Host != "":
		return "host ", p.Host
	}
	return "key ", p.Thumbprint
}

// splitIdentity splits a normalised key-set URL (signer.KeySet.URL). The
// parts are substrings of u (no allocation for a lowercase host).
func splitIdentity(u string) Identity {
	i := strings.Index(u, "://")
	if i < 0 {
		return Identity{}
	}
	rest := u[i+3:]
	j := strings.IndexAny(rest, "/?")
	if j < 0 {
		j = len(rest)
	}
	origin, path := u[:i+3+j], rest[j:]
	path, query, _ := strings.Cut(path, "?")
	path = strings.TrimRight(path, "/")
	if path == signer.DirectoryPath {
		path = ""
	}
	p := Identity{Origin: origin, Host: strings.ToLower(hostOf(origin)), Path: path, Query: query}
	// Exact is a substring of u when nothing was dropped.
	switch {
	case path == "" && query == "":
		p.exact = origin
	case len(u) == len(origin)+len(path)+len(query)+min(len(query), 1) && (path != "" || query == ""):
		p.exact = u
	}
	return p
}
