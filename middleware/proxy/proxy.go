// Package proxy puts the verification middleware in front of a service
// written in any language: as a reverse proxy that forwards verified
// requests upstream with the agent's identity in X-Agent-* headers, or as
// the forward-auth endpoint of nginx (auth_request), Traefik (ForwardAuth)
// or Caddy (forward_auth).
//
//	v, _ := middleware.New(middleware.Config{Keys: keys, Mode: middleware.Optional})
//	h, _ := proxy.New(proxy.Config{Verifier: v, Upstream: upstreamURL, Services: []string{"https://agentid.example"}})
//	http.ListenAndServe(":8080", h)
//
// As a reverse proxy, every incoming header whose name, case-folded with
// "_" read as "-", starts with x-agent- is removed, and the proxy's own
// headers are set on the outgoing request after hop-by-hop removal, so a
// client can neither claim an identity nor make the proxy drop the one it
// set (Connection: X-Agent-Uid). The proxy sets X-Agent-Verdict
// (protocol-01's verified, invalid or unverified: middleware.Result.Outcome)
// and, for a verified request, X-Agent-Id (the identity: an origin or a
// key-set URL), X-Agent-Key-Id, X-Agent-Uid for agents of a configured
// agentid service only, and one X-Agent-Metadata-<key> per member of a
// covered Signed-Agent-Metadata; a signed request that failed also gets
// X-Agent-Reason, the error code. The verifier's mode decides what is
// forwarded: Required forwards verified requests only, Optional also
// unsigned ones, Observe everything (with its verdict).
//
// As a forward-auth endpoint it answers only the addresses of the proxy in
// front of it and reads only that proxy's headers (Config.ForwardAuth).
//
// In both roles a request whose path is not normal (middleware.CheckPath:
// a dot segment, "//", an encoded "/" or ".", a backslash, ";", …) is
// refused with 400 invalid_request before it is verified: the path the
// rules matched is then the path forwarded, and the path the service
// reads, however it normalises.
//
// Config.Decide gives an owner's rules (package rules) the last word on
// each verified request; the access log then records the answer the
// client got, refusals by the rules included, in one line per request.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/clientaddr"
	"github.com/agentid/agentid/signer"
)

// The headers the proxy sets; incoming headers with the prefix are removed.
const (
	HeaderPrefix  = "X-Agent-"
	HeaderVerdict = "X-Agent-Verdict"
	HeaderID      = "X-Agent-Id"
	HeaderUID     = "X-Agent-Uid"
	HeaderKeyID   = "X-Agent-Key-Id"
	HeaderReason  = "X-Agent-Reason"
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
	// 403, and the README's snippet restores the status from this header.
	HeaderRefusalStatus = "X-Agent-Refusal-Status"
)

// DefaultMaxIdleConnsPerHost is how many idle upstream connections the
// default transport keeps: enough for a busy proxy to reuse its upstream
// connections instead of opening one per request.
const DefaultMaxIdleConnsPerHost = 256

// Front names the proxy in front of a forward-auth endpoint; the endpoint
// reads the original request from that proxy's headers only.
type Front string

// The fronts a forward-auth endpoint understands.
const (
	// FrontNginx reads X-Original-Method, X-Original-URI, the Host header
	// and, if present, X-Original-Proto (https when absent), as the
	// auth_request snippet of the README sets them, and X-Forwarded-For
	// (the client's address, $remote_addr). Other X-Forwarded-* are
	// ignored.
	FrontNginx Front = "nginx"
	// FrontTraefik reads X-Forwarded-Method, -Proto, -Host, -Uri and -For,
	// which Traefik's ForwardAuth sets (overwriting the client's; -For ends
	// with the client's address).
	FrontTraefik Front = "traefik"
	// FrontCaddy reads X-Forwarded-Method, -Uri, -Host, -Proto and -For,
	// which Caddy's forward_auth and reverse_proxy set (overwriting the
	// client's; -For ends with the client's address).
	FrontCaddy Front = "caddy"
)

// Fronts lists the fronts, for flag help and errors.
var Fronts = []Front{FrontNginx, FrontTraefik, FrontCaddy}

// Metrics receives the proxy's counts; *metrics.Registry of the reference
// server satisfies it. Implementations must be safe for concurrent use.
// Verification outcomes are the verifier's to report, through its
// middleware.Config.OnResult hook.
type Metrics interface {
	// ObserveRequest counts one answer to a client.
	ObserveRequest(route, method string, status int)
}

// Config configures a proxy handler.
type Config struct {
	// Verifier checks every request; its Mode decides what is forwarded.
	// Required.
	Verifier *middleware.Verifier
	// Upstream is the service requests are forwarded to. Required unless
	// ForwardAuth is set; the two exclude each other.
	Upstream *url.URL
	// ForwardAuth, if set, makes the handler answer the auth subrequests
	// of that front proxy instead of forwarding: 200 with the X-Agent-*
	// headers when the original request may go on, else the refusal (the
	// JSON error body with Accept-Signature, repeated in X-Agent-Refusal;
	// for nginx, with its status in X-Agent-Refusal-Status, and answered
	// 403 when that status is neither 401 nor 403). For Caddy, a 200 carries
	// every X-Agent-* header, empty when it does not apply.
	// The original request is rebuilt from the front's headers only (see
	// Front); its RemoteAddr, which per-address limits read, is the client
	// address middleware/clientaddr reads in X-Forwarded-For, ForwardAuthFrom
	// being the trusted proxies (the front's own address if there is none).
	// Its path must be normal (middleware.CheckPath), else 400
	// invalid_request. Subrequests carry no body: a signature covering
	// content-digest cannot be checked this way and is refused
	// (invalid_signature_input; passed as invalid in Observe mode). A
	// forward-auth endpoint cannot remove headers from the original
	// request, so one carrying any X-Agent-* header (in any spelling) is
	// refused (forbidden), in every mode: the service would read them.
	ForwardAuth Front
	// ForwardAuthFrom lists the addresses whose subrequests are answered
	// (others get 403 forbidden), and whose X-Forwarded-For entries are
	// believed. If nil, loopback only (127.0.0.0/8, ::1).
	ForwardAuthFrom []netip.Prefix
	// Services are the base URLs of the agentid services whose agents get
	// X-Agent-Uid, such as "https://agentid.example": an identity gets a
	// uid only when it is exactly <scheme>://<uid>.<host> of one of them,
	// or that origin's root URL <scheme>://<uid>.<host>/ (the identity of
	// the strict-01 profile, the URL as fetched).
	// If nil, no request gets X-Agent-Uid.
	Services []string
	// Transport carries requests upstream. If nil,
	// NewTransport(MaxIdleConnsPerHost), except that to an http://
	// upstream the requests without a body (an upgrade aside) are written
	// and their answers read on the request's own goroutine, on a pool of
	// connections of the same size, which costs less CPU per request.
	Transport http.RoundTripper
	// MaxIdleConnsPerHost sizes the default transport's pool of idle
	// upstream connections. If 0, DefaultMaxIdleConnsPerHost. Ignored when
	// Transport is set.
	MaxIdleConnsPerHost int
	// AccessLog, if set, gets one line per request: method, host, path
	// (of the original request in forward-auth), status, duration_ms,
	// verdict, reason (the error code: Decide's refusal's, else the
	// verifier's), agent, kid, uid, agent_name and agent_purpose (see
	// AgentCard) and, when the upstream failed, upstream_error.
	AccessLog *slog.Logger
	// Metrics, if set, counts answers.
	Metrics Metrics
	// Decide, if set, has the last word on each request the verifier let
	// through, before it is forwarded (in forward-auth, before the 200).
	// It returns nil to let the request go on, having possibly set headers
	// on w (such as rate-limit headers, sent with the answer), or writes a
	// refusal to w and returns its error: the access log line and Metrics
	// then record that refusal's status and code, so the one line of a
	// request tells what its client got. A refused request never reaches
	// the upstream. (*rules.Gate).Apply fits; run the verifier in Observe
	// mode so that every request reaches it. It must be safe for
	// concurrent use.
	Decide func(w http.ResponseWriter, r *http.Request, res *middleware.Result) *middleware.Error
	// AgentCard, if set, names verified agents in the access log: given
	// the agent's key-set URL (middleware.Agent.DirectoryURL), it returns
	// the name and purpose its Signature Agent Card gives, "" for none
	// (logged as agent_name and agent_purpose when not empty).
	// (*keyfetch.Fetcher).AgentCard answers it without I/O. It must be safe
	// for concurrent use.
	AgentCard func(keySetURL string) (name, purpose string)
}

// Handler is a verifying reverse proxy or forward-auth endpoint.
type Handler struct {
	cfg      Config
	proxy    *httputil.ReverseProxy
	route    string
	from     []netip.Prefix
	fronts   *clientaddr.Reader // X-Forwarded-For of the fronts in from
	services []signer.ServiceURL
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// NewTransport returns the transport New uses when Config.Transport is nil:
// http.DefaultTransport's dialer, timeouts and TLS settings, no proxy from
// the environment (the upstream is a service next door), and up to
// maxIdlePerHost idle connections kept per upstream host
// (DefaultMaxIdleConnsPerHost if maxIdlePerHost ≤ 0).
func NewTransport(maxIdlePerHost int) *http.Transport {
	if maxIdlePerHost <= 0 {
		maxIdlePerHost = DefaultMaxIdleConnsPerHost
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConnsPerHost = maxIdlePerHost
	if t.MaxIdleConns < maxIdlePerHost {
		t.MaxIdleConns = maxIdlePerHost
	}
	return t
}

// New validates cfg and returns the handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Verifier == nil {
		return nil, errors.New("proxy: Config.Verifier is required")
	}
	h := &Handler{cfg: cfg, route: "forward-auth", from: cfg.ForwardAuthFrom}
	for _, s := range cfg.Services {
		u, err := signer.ParseServiceURL(s)
		if err != nil {
			return nil, fmt.Errorf("proxy: Config.Services: %w", err)
		}
		h.services = append(h.services, u)
	}
	if cfg.ForwardAuth != "" {
		switch cfg.ForwardAuth {
		case FrontNginx, FrontTraefik, FrontCaddy:
		default:
			return nil, fmt.Errorf("proxy: Config.ForwardAuth %q: want nginx, traefik or caddy", cfg.ForwardAuth)
		}
		if cfg.Upstream != nil {
			return nil, errors.New("proxy: Config.Upstream and Config.ForwardAuth exclude each other")
		}
		if h.from == nil {
			h.from = loopback
		}
		for _, p := range h.from {
			if !p.IsValid() {
				return nil, errors.New("proxy: Config.ForwardAuthFrom holds an invalid prefix")
			}
		}
		h.fronts = clientaddr.New(h.from, "X-Forwarded-For")
		return h, nil
	}
	if cfg.Upstream == nil || cfg.Upstream.Host == "" || (cfg.Upstream.Scheme != "http" && cfg.Upstream.Scheme != "https") {
		return nil, errors.New("proxy: Config.Upstream must be an http or https URL (or set ForwardAuth)")
	}
	h.route = "proxy"
	if cfg.Transport == nil {
		t := NewTransport(cfg.MaxIdleConnsPerHost)
		cfg.Transport = t
		if cfg.Upstream.Scheme == "http" {
			// Bodiless requests (most of them) skip http.Transport's
			// goroutines; see directTransport.
			cfg.Transport = newDirectTransport(cfg.Upstream.Host, t, t.MaxIdleConnsPerHost)
		}
		h.cfg.Transport = cfg.Transport
	}
	up := cfg.Upstream
	h.proxy = &httputil.ReverseProxy{
		// Rewrite runs after the hop-by-hop headers (including those the
		// client's Connection names) were removed from the outgoing
		// request: the X-Agent-* headers set here always reach the
		// upstream.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.Host = pr.In.Host // the upstream sees the host the client asked for
			pr.SetXForwarded()
			StripAgentHeaders(pr.Out.Header)
			StripAgentHeaders(pr.Out.Trailer) // declared trailers are sent too
			if st, ok := pr.In.Context().Value(stateKey{}).(*requestState); ok {
				h.setAgentHeaders(pr.Out.Header, st.res)
			}
		},
		Transport:  cfg.Transport,
		BufferPool: copyBuffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if st, ok := r.Context().Value(stateKey{}).(*requestState); ok {
				st.upstreamErr = err
			}
			middleware.WriteError(w, &middleware.Error{Code: middleware.CodeUpstreamUnavailable, Message: "the upstream service did not answer", Err: err})
		},
	}
	return h, nil
}

// copyBuffers lends the reverse proxy its buffers for copying response
// bodies; without a pool it allocates (and clears) 32 KiB per request.
var copyBuffers = &bufferPool{}

// bufferPool is an httputil.BufferPool over a sync.Pool.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// stateKey carries a *requestState from ServeHTTP to the reverse proxy's
// hooks.
type stateKey struct{}

// requestState is what one proxied request's hooks share.
type requestState struct {
	res         *middleware.Result
	upstreamErr error
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &middleware.StatusWriter{ResponseWriter: w}
	if h.cfg.ForwardAuth != "" {
		h.forwardAuth(sw, r, start)
		return
	}
	StripAgentHeaders(r.Header)
	if err := middleware.CheckPath(r.URL); err != nil {
		h.cfg.Verifier.WriteError(sw, err)
		h.observe(r, sw.Status, &middleware.Result{Request: r, Verdict: middleware.Invalid, Err: err}, nil, nil, start)
		return
	}
	res := h.cfg.Verifier.Check(r)
	if !res.Passed {
		h.cfg.Verifier.WriteError(sw, res.Err)
		h.observe(r, sw.Status, res, nil, nil, start)
		return
	}
	if h.cfg.Decide != nil {
		if refusal := h.cfg.Decide(sw, r, res); refusal != nil {
			if sw.Status == 0 { // a Decide that wrote nothing still refuses
				middleware.WriteError(sw, refusal)
			}
			h.observe(r, sw.Status, res, refusal, nil, start)
			return
		}
	}
	st := &requestState{res: res}
	h.proxy.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
	h.observe(r, sw.Status, res, nil, st.upstreamErr, start)
}

// forwardAuth answers one auth subrequest.
func (h *Handler) forwardAuth(sw *middleware.StatusWriter, r *http.Request, start time.Time) {
	if addr, ok := h.allowed(r.RemoteAddr); !ok {
		err := middleware.Fail(middleware.CodeForbidden,
			"this forward-auth endpoint answers only the proxy in front of it, and %s is not one of its addresses", addr)
		h.refuse(sw, err)
		h.observe(r, sw.Status, &middleware.Result{Request: r, Verdict: middleware.Invalid, Err: err}, nil, nil, start)
		return
	}
	orig, err := originalRequest(r, h.cfg.ForwardAuth, h.fronts)
	if err != nil {
		h.refuse(sw, err)
		h.observe(r, sw.Status, &middleware.Result{Request: r, Verdict: middleware.Invalid, Err: err}, nil, nil, start)
		return
	}
	signed := h.cfg.Verifier.ParseChecked(orig)
	res := h.precheck(orig, signed)
	if res == nil {
		res = h.cfg.Verifier.CheckSigned(signed, nil)
	}
	if !res.Passed {
		h.refuse(sw, res.Err)
		h.observe(orig, sw.Status, res, nil, nil, start)
		return
	}
	if h.cfg.Decide != nil {
		c := &captureWriter{header: http.Header{}}
		if refusal := h.cfg.Decide(c, orig, res); refusal != nil {
			if c.status == 0 {
				middleware.WriteError(c, refusal)
			}
			h.writeRefusal(sw, c)
			h.observe(orig, sw.Status, res, refusal, nil, start)
			return
		}
		for k, v := range c.header {
			sw.Header()[k] = v
		}
	}
	if h.cfg.ForwardAuth == FrontCaddy {
		// Caddy 2.6's copy_headers gives the service a header this answer
		// lacks as the literal text of its placeholder
		// ("{http.reverse_proxy.header.X-Agent-Uid}"), which reads as a
		// value: every header it may copy is sent, empty if it does not
		// apply (newer Caddy then copies nothing).
		for _, k := range []string{HeaderID, HeaderUID, HeaderKeyID, HeaderReason} {
			sw.Header()[k] = []string{""}
		}
	}
	h.setAgentHeaders(sw.Header(), res)
	sw.WriteHeader(http.StatusOK)
	h.observe(orig, sw.Status, res, nil, nil, start)
}

// allowed reports whether a subrequest from remoteAddr may be answered, and
// the address it read.
func (h *Handler) allowed(remoteAddr string) (string, bool) {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return signer.Truncate(remoteAddr), false
	}
	ip := ap.Addr().Unmap()
	return ip.String(), h.fronts.Trusted(ip)
}

// precheck refuses, before any verification (so no nonce is spent), what a
// forward-auth endpoint cannot handle: X-Agent-* headers it cannot remove
// from the original request (refused in every mode), and signatures over
// the body it never sees (among those the verifier would check, as signed
// parsed them; invalid, passed in Observe mode). It returns nil when the
// request may be verified. Whether a refusal passes follows from which
// check refused, never from the code its error carries.
func (h *Handler) precheck(orig *http.Request, signed *middleware.Signed) *middleware.Result {
	if names := agentHeaders(orig.Header); len(names) > 0 {
		// Refused even in Observe mode (which the rules use: an observe
		// route lets an invalid request through): the client's X-Agent-*
		// headers would reach the service.
		err := middleware.Fail(middleware.CodeForbidden,
			"the request carries %s: X-Agent-* headers are set only by the proxy in front of the service, and this forward-auth endpoint cannot remove them", signer.Truncate(strings.Join(names, ", ")))
		return &middleware.Result{Request: orig, Verdict: middleware.Invalid, Err: err}
	}
	if h.cfg.Verifier.Covers(signed, "content-digest") {
		// An invalid signature like any other: it passes, as invalid, in
		// Observe mode only.
		err := middleware.Fail(middleware.CodeInvalidSignatureInput,
			"the signature covers content-digest, but a forward-auth endpoint never sees the request body: sign without content-digest, or verify where the body is seen (a reverse proxy or the service itself)")
		return &middleware.Result{Request: orig, Verdict: middleware.Invalid, Err: err, Passed: h.cfg.Verifier.Mode() == middleware.Observe}
	}
	return nil
}

// refuse writes a forward-auth refusal: the verifier's JSON error body
// (with Accept-Signature on 401 and 403), the body repeated in
// X-Agent-Refusal for nginx. For nginx, the status is also in
// X-Agent-Refusal-Status, and a status other than 401 and 403 is answered
// 403 (the body keeps the real one), since auth_request would make it 500.
func (h *Handler) refuse(sw *middleware.StatusWriter, err error) {
	c := &captureWriter{header: http.Header{}}
	h.cfg.Verifier.WriteError(c, err)
	h.writeRefusal(sw, c)
}

// writeRefusal sends the refusal captured in c, its body repeated in
// X-Agent-Refusal.
func (h *Handler) writeRefusal(sw *middleware.StatusWriter, c *captureWriter) {
	for k, v := range c.header {
		sw.Header()[k] = v
	}
	sw.Header().Set(HeaderRefusal, strings.TrimSpace(c.body.String()))
	status := c.status
	if h.cfg.ForwardAuth == FrontNginx {
		sw.Header().Set(HeaderRefusalStatus, strconv.Itoa(status))
		if status != http.StatusUnauthorized && status != http.StatusForbidden {
			status = http.StatusForbidden
		}
	}
	sw.WriteHeader(status)
	sw.Write(c.body.Bytes())
}

// captureWriter records a response written to it.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(b)
}

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
// sends upstream: X-Agent-Verdict, and X-Agent-Id, X-Agent-Key-Id,
// X-Agent-Uid (for an agent of one of services only) and
// X-Agent-Metadata-* for a verified request, X-Agent-Reason for an invalid
// one. Call StripAgentHeaders on hd first: headers already there with
// other spellings are left alone.
func SetAgentHeaders(hd http.Header, res *middleware.Result, services []signer.ServiceURL) {
	// The names are canonical; the values share one array (each header
	// gets a full slice of its own, so an append to one never reaches
	// another).
	vals := make([]string, 0, 4)
	set := func(name, value string) {
		vals = append(vals, value)
		hd[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(HeaderVerdict, string(res.Outcome()))
	switch res.Verdict {
	case middleware.Verified:
		set(HeaderID, res.Agent.ID)
		set(HeaderKeyID, res.Agent.KeyID)
		if uid := serviceUID(res.Agent.ID, services); uid != "" {
			set(HeaderUID, uid)
		}
		for k, v := range res.Agent.Metadata {
			hd.Set(HeaderMetadataPrefix+k, v)
		}
	case middleware.Invalid:
		set(HeaderReason, string(res.Err.Code))
	}
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

// frontHeaders names, for a refusal, the headers each front must set to
// describe the original request.
var frontHeaders = map[Front]string{
	FrontNginx:   "X-Original-Method and X-Original-URI (proxy_set_header in the auth location) and Host",
	FrontTraefik: "X-Forwarded-Method, X-Forwarded-Uri and X-Forwarded-Host (Traefik ForwardAuth sets them)",
	FrontCaddy:   "X-Forwarded-Method, X-Forwarded-Uri and X-Forwarded-Host (Caddy forward_auth sets them)",
}

// frontClientHeader says, for a refusal, how each front hands over the
// client's address.
var frontClientHeader = map[Front]string{
	FrontNginx:   "proxy_set_header X-Forwarded-For $remote_addr in the auth location",
	FrontTraefik: "Traefik ForwardAuth sets it",
	FrontCaddy:   "Caddy forward_auth sets it",
}

// originalRequest rebuilds the request an auth subrequest stands for, from
// the headers of front only, with the client's address as its RemoteAddr:
// the address fronts reads in X-Forwarded-For, which each front sets (or
// appends) as the address the original request came from (the front's own
// address when it sends none: every client then shares one per-address
// budget). An entry that is not an address is refused: the front is
// misconfigured.
func originalRequest(r *http.Request, front Front, fronts *clientaddr.Reader) (*http.Request, *middleware.Error) {
	hd := r.Header
	var method, uri, host, proto string
	switch front {
	case FrontNginx:
		method, uri, host, proto = hd.Get("X-Original-Method"), hd.Get("X-Original-URI"), r.Host, hd.Get("X-Original-Proto")
	default: // Traefik, Caddy
		method, uri, host, proto = hd.Get("X-Forwarded-Method"), hd.Get("X-Forwarded-Uri"), hd.Get("X-Forwarded-Host"), hd.Get("X-Forwarded-Proto")
	}
	if method == "" || uri == "" || uri[0] != '/' || host == "" {
		return nil, middleware.Fail(middleware.CodeInvalidRequest, "a forward-auth request from %s needs %s, describing the original request", front, frontHeaders[front])
	}
	if proto == "" {
		proto = "https"
	}
	if proto != "http" && proto != "https" {
		return nil, middleware.Fail(middleware.CodeInvalidRequest, "the original scheme %q is not http or https", signer.Truncate(proto))
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, middleware.Fail(middleware.CodeInvalidRequest, "the original URI %q does not parse", signer.Truncate(uri))
	}
	if err := middleware.CheckPath(u); err != nil {
		return nil, err
	}
	client, bad := fronts.Addr(r)
	if bad != "" {
		return nil, middleware.Fail(middleware.CodeInvalidRequest, "the X-Forwarded-For of a forward-auth request from %s must end with the address of the client (%s)", front, frontClientHeader[front])
	}
	u.Scheme, u.Host = proto, host
	orig := r.Clone(r.Context())
	orig.Method, orig.URL, orig.Host, orig.RequestURI = method, u, host, uri
	if peer, _ := clientaddr.ParseAddr(r.RemoteAddr); client != peer {
		// Per-address limits then key on the client, not on the front.
		orig.RemoteAddr = netip.AddrPortFrom(client, 0).String()
	}
	orig.Body, orig.ContentLength = http.NoBody, 0
	return orig, nil
}

// observe counts and logs one answer; r is the original request (in
// forward-auth, once rebuilt), refusal the error of Config.Decide's
// refusal (nil if none).
func (h *Handler) observe(r *http.Request, status int, res *middleware.Result, refusal *middleware.Error, upstreamErr error, start time.Time) {
	if status == 0 {
		status = http.StatusOK
	}
	if m := h.cfg.Metrics; m != nil {
		m.ObserveRequest(h.route, r.Method, status)
	}
	if l := h.cfg.AccessLog; l != nil {
		// Room for every attribute below, so that the appends never grow
		// (and copy) the slice.
		attrs := make([]slog.Attr, 0, 13)
		attrs = append(attrs,
			slog.String("method", r.Method), slog.String("host", r.Host), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		)
		if res != nil {
			attrs = append(attrs, slog.String("verdict", string(res.Outcome())))
			if refusal != nil {
				attrs = append(attrs, slog.String("reason", string(refusal.Code)))
			} else if res.Err != nil {
				attrs = append(attrs, slog.String("reason", string(res.Err.Code)))
			}
			if res.Verdict == middleware.Verified {
				attrs = append(attrs, slog.String("agent", res.Agent.ID), slog.String("kid", res.Agent.KeyID))
				if uid := h.uid(res.Agent.ID); uid != "" {
					attrs = append(attrs, slog.String("uid", uid))
				}
				if h.cfg.AgentCard != nil {
					name, purpose := h.cfg.AgentCard(res.Agent.DirectoryURL)
					if name != "" {
						attrs = append(attrs, slog.String("agent_name", name))
					}
					if purpose != "" {
						attrs = append(attrs, slog.String("agent_purpose", purpose))
					}
				}
			}
		}
		if upstreamErr != nil {
			attrs = append(attrs, slog.String("upstream_error", upstreamErr.Error()))
		}
		l.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	}
}
