package proxy

import (
	"net/http"
	"slices"
	"strings"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// The headers the proxy sets; every incoming X-Agent-* header is removed
// (IsAgentHeader).
const (
	// HeaderOutcome is the outcome: verified, invalid, unverified or
	// not-present (middleware.Outcome; docs/outcomes.md).
	HeaderOutcome = "X-Agent-Outcome"
	// HeaderReason is the outcome's reason (middleware.Result.Reason) when
	// the outcome is not verified.
	HeaderReason = "X-Agent-Reason"
	// HeaderVerdict is the outcome in the words it had before not-present:
	// an unsigned request is "unverified" (Verdict).
	HeaderVerdict = "X-Agent-Verdict"
	HeaderID      = "X-Agent-Id"
	HeaderUID     = "X-Agent-Uid"
	HeaderKeyID   = "X-Agent-Key-Id"
	// HeaderRefusal carries, on a forward-auth refusal, the JSON error body
	// again: nginx's auth_request drops the body of the subrequest's
	// answer, but auth_request_set can read a header and error_page can
	// answer the client with it.
	HeaderRefusal = "X-Agent-Refusal"
	// HeaderMetadataPrefix starts one header per Signed-Agent-Metadata
	// member: X-Agent-Metadata-<key>.
	HeaderMetadataPrefix = "X-Agent-Metadata-"
	// HeaderRefusalStatus carries, on a forward-auth refusal to nginx, the
	// refusal's HTTP status. nginx's auth_request turns any answer but 2xx,
	// 401 and 403 into its own 500, so for nginx a refusal with another
	// status (421 misdirected_request, 503 key_fetch_failed, …) is answered
	// 403, and the nginx snippet of docs/proxy.md restores the status from
	// this header.
	HeaderRefusalStatus = "X-Agent-Refusal-Status"
)

// IsAgentHeader reports whether a header name, case-folded with "_" read
// as "-" (as CGI-style servers read it), starts with x-agent-: the headers
// a client may not send through the proxy.
func IsAgentHeader(name string) bool {
	const p = "x-agent-"
	if len(name) < len(p) {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := name[i]
		if c == '_' {
			c = '-'
		} else if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != p[i] {
			return false
		}
	}
	return true
}

// StripAgentHeaders deletes every X-Agent-* header, in any spelling
// (IsAgentHeader), as the reverse proxy does with each incoming request.
func StripAgentHeaders(h http.Header) {
	for k := range h {
		if IsAgentHeader(k) {
			delete(h, k)
		}
	}
}

// agentHeaders returns the names of the X-Agent-* headers in h, in any
// spelling.
func agentHeaders(h http.Header) []string {
	var names []string
	for k := range h {
		if IsAgentHeader(k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names
}

// setAgentHeaders writes the outcome as X-Agent-* headers.
func (h *Handler) setAgentHeaders(hd http.Header, res *middleware.Result) {
	SetAgentHeaders(hd, res, h.services)
}

// SetAgentHeaders writes res as the X-Agent-* headers the reverse proxy
// sends upstream: X-Agent-Outcome and X-Agent-Verdict, and X-Agent-Id,
// X-Agent-Key-Id, X-Agent-Uid (for an agent of one of services only) and
// X-Agent-Metadata-* for a verified request, X-Agent-Reason for any other.
// Call StripAgentHeaders on hd first: headers already there with other
// spellings are left alone.
func SetAgentHeaders(hd http.Header, res *middleware.Result, services []signer.ServiceURL) {
	// The names are canonical; the values share one array (each header
	// gets a full slice of its own, so an append to one never reaches
	// another).
	vals := make([]string, 0, 5)
	set := func(name, value string) {
		vals = append(vals, value)
		hd[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(HeaderOutcome, string(res.Outcome))
	set(HeaderVerdict, Verdict(res.Outcome))
	if res.Outcome == middleware.OutcomeVerified {
		set(HeaderID, res.Agent.ID)
		set(HeaderKeyID, res.Agent.KeyID)
		if uid := serviceUID(res.Agent.ID, services); uid != "" {
			set(HeaderUID, uid)
		}
		for k, v := range res.Agent.Metadata {
			hd.Set(HeaderMetadataPrefix+k, v)
		}
		return
	}
	if reason := reasonOf(res); reason != "" {
		set(HeaderReason, reason)
	}
}

// reasonOf is res's reason, for a Result built without one (from its
// error).
func reasonOf(res *middleware.Result) string {
	switch {
	case res.Reason != "":
		return res.Reason
	case res.Err != nil:
		return res.Err.Code.Reason()
	}
	return ""
}

// Verdict is o as X-Agent-Verdict, the access log's verdict and Caddy's
// {http.agentid.verdict} say it: the outcome, except that an unsigned
// request (not-present) is "unverified", as it was before not-present was
// told apart.
func Verdict(o middleware.Outcome) string {
	if o == middleware.OutcomeNotPresent {
		return string(middleware.OutcomeUnverified)
	}
	return string(o)
}

// uid returns the uid of an identity <scheme>://<uid>.<host> of a
// configured service, else "".
func (h *Handler) uid(id string) string { return serviceUID(id, h.services) }

// UID returns the uid X-Agent-Uid carries for the verified identity id:
// its first label when id is an agent of one of Config.Services, else "".
func (h *Handler) UID(id string) string { return h.uid(id) }

// serviceUID returns the uid of an identity <scheme>://<uid>.<host> of one
// of services, or that origin's root URL, else "". It is stricter than
// policy.Services.UID, which the rules and budgets key on: the
// scheme must be the service's and the identity an origin, as
// X-Agent-Uid promises.
func serviceUID(id string, services []signer.ServiceURL) string {
	for _, s := range services {
		if host, ok := strings.CutPrefix(id, s.Scheme+"://"); ok {
			if uid := s.UIDOfHost(strings.TrimSuffix(host, "/")); uid != "" {
				return uid
			}
		}
	}
	return ""
}
