package proxy

import (
	"bytes"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/clientaddr"
	"github.com/agentid/agentid/middleware/telemetry"
	"github.com/agentid/agentid/signer"
)

// Front names the proxy in front of a forward-auth endpoint; the endpoint
// reads the original request from that proxy's headers only.
type Front string

// The fronts a forward-auth endpoint understands.
const (
	// FrontNginx reads X-Original-Method, X-Original-URI, the Host header
	// and, if present, X-Original-Proto (https when absent), as the
	// auth_request snippet of docs/proxy.md sets them, and X-Forwarded-For
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

// forwardAuth answers one auth subrequest.
func (h *Handler) forwardAuth(sw *middleware.StatusWriter, r *http.Request, start time.Time, tr *telemetry.Request) {
	if addr, ok := h.allowed(r.RemoteAddr); !ok {
		err := middleware.Fail(middleware.CodeForbidden,
			"this forward-auth endpoint answers only the proxy in front of it, and %s is not one of its addresses", addr)
		h.refuse(sw, r, err)
		h.observe(r, sw.Status, h.refusedBefore(r, err, false), nil, nil, start, tr)
		return
	}
	orig, err := originalRequest(r, h.cfg.ForwardAuth, h.fronts)
	if err != nil {
		h.refuse(sw, r, err)
		h.observe(r, sw.Status, h.refusedBefore(r, err, false), nil, nil, start, tr)
		return
	}
	signed := h.cfg.Verifier.ParseChecked(orig)
	res := h.precheck(orig, signed)
	if res == nil {
		res = h.cfg.Verifier.CheckSigned(signed, nil)
	}
	if !res.Passed {
		h.refuse(sw, orig, res.Err)
		h.observe(orig, sw.Status, res, nil, nil, start, tr)
		return
	}
	if h.cfg.Decide != nil {
		c := &captureWriter{header: http.Header{}}
		if refusal := h.cfg.Decide(c, orig, res); refusal != nil {
			if c.status == 0 {
				middleware.WriteError(c, orig, refusal)
			}
			h.writeRefusal(sw, c)
			h.observe(orig, sw.Status, res, refusal, nil, start, tr)
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
	h.observe(orig, sw.Status, res, nil, nil, start, tr)
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
		return h.refusedBefore(orig, err, false)
	}
	if h.cfg.Verifier.Covers(signed, "content-digest") {
		// An invalid signature like any other: it passes, as invalid, in
		// Observe mode only.
		err := middleware.Fail(middleware.CodeInvalidSignatureInput,
			"the signature covers content-digest, but a forward-auth endpoint never sees the request body: sign without content-digest, or verify where the body is seen (a reverse proxy or the service itself)")
		return h.refusedBefore(orig, err, h.cfg.Verifier.Mode() == middleware.Observe)
	}
	return nil
}

// refuse writes a forward-auth refusal: the verifier's JSON error body
// (with Accept-Signature on 401 and 403), the body repeated in
// X-Agent-Refusal for nginx. For nginx, the status is also in
// X-Agent-Refusal-Status, and a status other than 401 and 403 is answered
// 403 (the body keeps the real one), since auth_request would make it 500.
func (h *Handler) refuse(sw *middleware.StatusWriter, r *http.Request, err error) {
	c := &captureWriter{header: http.Header{}}
	h.cfg.Verifier.WriteError(c, r, err)
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

// captureWriter records a response written to it, and sends nothing: the
// refusal it holds is rewritten (its body into X-Agent-Refusal, its status
// for nginx) before it is answered through the request's
// middleware.StatusWriter, which passes everything on as it is written.
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
