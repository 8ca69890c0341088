// Package proxy puts the verification middleware in front of a service
// written in any language: as a reverse proxy that forwards verified
// requests upstream with the agent's identity in X-Agent-* headers, or as
// the forward-auth endpoint of nginx (auth_request), Traefik (ForwardAuth)
// or Caddy (forward_auth).
//
//	v, _ := middleware.NewVerifier(middleware.Config{Keys: keys, Mode: middleware.Optional})
//	h, _ := proxy.New(proxy.Config{Verifier: v, Upstream: upstreamURL})
//	http.ListenAndServe(":8080", h)
//
// Every header whose name starts with X-Agent- is deleted from incoming
// requests, so a client cannot claim an identity; the proxy then sets
// X-Agent-Verdict (protocol-01's verified, invalid or unverified:
// middleware.Result.Outcome) and, for a verified request, X-Agent-Id (the
// identity: an origin or a key-set URL), X-Agent-Uid (for agents of an
// agentid service), X-Agent-Key-Id and one X-Agent-Metadata-<key> per
// member of a covered Signed-Agent-Metadata; a signed request that failed
// also gets X-Agent-Reason, the error code. The verifier's
// mode decides what is forwarded: Required forwards verified requests only,
// Optional also unsigned ones, Observe everything (with its verdict).
package proxy

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
)

// The headers the proxy sets; incoming headers with the prefix are removed.
const (
	HeaderPrefix  = "X-Agent-"
	HeaderVerdict = "X-Agent-Verdict"
	HeaderID      = "X-Agent-Id"
	HeaderUID     = "X-Agent-Uid"
	HeaderKeyID   = "X-Agent-Key-Id"
	HeaderReason  = "X-Agent-Reason"
	// HeaderMetadataPrefix starts one header per Signed-Agent-Metadata
	// member: X-Agent-Metadata-<key>.
	HeaderMetadataPrefix = "X-Agent-Metadata-"
)

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
	// ForwardAuth.
	Upstream *url.URL
	// ForwardAuth answers auth subrequests instead of forwarding: 200 with
	// the X-Agent-* headers when the original request may go on, else the
	// refusal (401 with the JSON error body and Accept-Signature). The
	// original request is rebuilt from X-Forwarded-Method,
	// X-Forwarded-Proto, X-Forwarded-Host and X-Forwarded-Uri (Traefik,
	// Caddy) or X-Original-Method and X-Original-URI with Host (nginx).
	// Auth subrequests carry no body: a signature covering content-digest
	// cannot be checked this way and is refused.
	ForwardAuth bool
	// Transport carries requests upstream. If nil, http.DefaultTransport.
	Transport http.RoundTripper
	// AccessLog, if set, gets one line per request: method, host, path,
	// status, verdict, reason (the error code), identity and duration.
	AccessLog *slog.Logger
	// Metrics, if set, counts answers.
	Metrics Metrics
}

// Handler is a verifying reverse proxy or forward-auth endpoint.
type Handler struct {
	cfg   Config
	proxy *httputil.ReverseProxy
	route string
}

// New validates cfg and returns the handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Verifier == nil {
		return nil, errors.New("proxy: Config.Verifier is required")
	}
	h := &Handler{cfg: cfg, route: "forward-auth"}
	if cfg.ForwardAuth {
		return h, nil
	}
	if cfg.Upstream == nil || cfg.Upstream.Host == "" || (cfg.Upstream.Scheme != "http" && cfg.Upstream.Scheme != "https") {
		return nil, errors.New("proxy: Config.Upstream must be an http or https URL (or set ForwardAuth)")
	}
	h.route = "proxy"
	up := cfg.Upstream
	h.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.Host = pr.In.Host // the upstream sees the host the client asked for
			pr.SetXForwarded()
		},
		Transport: cfg.Transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			middleware.WriteError(w, &middleware.Error{Code: middleware.CodeUpstreamUnavailable, Message: "the upstream service did not answer", Err: err})
		},
	}
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &middleware.StatusWriter{ResponseWriter: w}
	in := r
	if h.cfg.ForwardAuth {
		orig, err := originalRequest(r)
		if err != nil {
			middleware.WriteError(sw, err)
			h.observe(r, sw.Status, nil, start)
			return
		}
		in = orig
	}
	stripAgentHeaders(in.Header)
	res := h.cfg.Verifier.Check(in)
	if !res.Passed {
		h.cfg.Verifier.WriteError(sw, res.Err)
		h.observe(r, sw.Status, res, start)
		return
	}
	if h.cfg.ForwardAuth {
		setAgentHeaders(sw.Header(), res)
		sw.WriteHeader(http.StatusOK)
		h.observe(r, sw.Status, res, start)
		return
	}
	setAgentHeaders(in.Header, res)
	h.proxy.ServeHTTP(sw, in)
	h.observe(r, sw.Status, res, start)
}

// stripAgentHeaders deletes every header named X-Agent-*.
func stripAgentHeaders(h http.Header) {
	for k := range h {
		if len(k) >= len(HeaderPrefix) && strings.EqualFold(k[:len(HeaderPrefix)], HeaderPrefix) {
			delete(h, k)
		}
	}
}

// setAgentHeaders writes the outcome as X-Agent-* headers.
func setAgentHeaders(h http.Header, res *middleware.Result) {
	h.Set(HeaderVerdict, string(res.Outcome()))
	switch res.Verdict {
	case middleware.Verified:
		h.Set(HeaderID, res.Agent.ID)
		h.Set(HeaderKeyID, res.Agent.KeyID)
		if res.Agent.UID != "" {
			h.Set(HeaderUID, res.Agent.UID)
		}
		for k, v := range res.Agent.Metadata {
			h.Set(HeaderMetadataPrefix+k, v)
		}
	case middleware.Invalid:
		h.Set(HeaderReason, string(res.Err.Code))
	}
}

// originalRequest rebuilds the request an auth subrequest stands for.
func originalRequest(r *http.Request) (*http.Request, error) {
	h := r.Header
	method, uri, host := h.Get("X-Forwarded-Method"), h.Get("X-Forwarded-Uri"), h.Get("X-Forwarded-Host")
	proto := h.Get("X-Forwarded-Proto")
	if method == "" && uri == "" {
		// nginx auth_request: X-Original-URI (and X-Original-Method when
		// configured), the original Host.
		method, uri, host = h.Get("X-Original-Method"), h.Get("X-Original-URI"), r.Host
	}
	if method == "" {
		method = http.MethodGet
	}
	if uri == "" || uri[0] != '/' {
		return nil, middleware.Fail(middleware.CodeInvalidRequest, "a forward-auth request needs X-Forwarded-Uri (Traefik, Caddy) or X-Original-URI (nginx) holding the original path")
	}
	if host == "" {
		return nil, middleware.Fail(middleware.CodeInvalidRequest, "a forward-auth request needs X-Forwarded-Host or Host")
	}
	if proto != "http" && proto != "https" {
		proto = "https"
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, middleware.Fail(middleware.CodeInvalidRequest, "the original URI %q does not parse", truncate(uri))
	}
	u.Scheme, u.Host = proto, host
	orig := r.Clone(r.Context())
	orig.Method, orig.URL, orig.Host, orig.RequestURI = method, u, host, uri
	orig.Body, orig.ContentLength = http.NoBody, 0
	return orig, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func (h *Handler) observe(r *http.Request, status int, res *middleware.Result, start time.Time) {
	if status == 0 {
		status = http.StatusOK
	}
	if m := h.cfg.Metrics; m != nil {
		m.ObserveRequest(h.route, r.Method, status)
	}
	if l := h.cfg.AccessLog; l != nil {
		attrs := []slog.Attr{
			slog.String("method", r.Method), slog.String("host", r.Host), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Duration("duration", time.Since(start)),
		}
		if res != nil {
			attrs = append(attrs, slog.String("verdict", string(res.Outcome())))
			if res.Err != nil {
				attrs = append(attrs, slog.String("reason", string(res.Err.Code)))
			}
			if res.Verdict == middleware.Verified {
				attrs = append(attrs, slog.String("agent", res.Agent.ID), slog.String("kid", res.Agent.KeyID))
			}
		}
		l.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	}
}
