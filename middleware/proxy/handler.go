package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/clientaddr"
	"github.com/agentid/agentid/middleware/telemetry"
	"github.com/agentid/agentid/signer"
)

// Handler is a verifying reverse proxy or forward-auth endpoint.
type Handler struct {
	cfg      Config
	proxy    *httputil.ReverseProxy
	route    string
	from     []netip.Prefix
	fronts   *clientaddr.Reader // X-Forwarded-For of the fronts in from
	services []signer.ServiceURL
	tel      *telemetry.Server
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// New validates cfg and returns the handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Verifier == nil {
		return nil, errors.New("proxy: Config.Verifier is required")
	}
	h := &Handler{cfg: cfg, route: "forward-auth", from: cfg.ForwardAuthFrom,
		tel: telemetry.New(telemetry.Config{TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider})}
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
		t := newTransport(cfg.MaxIdleConnsPerHost)
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
			middleware.WriteError(w, r, &middleware.Error{Code: middleware.CodeUpstreamUnavailable, Message: "the upstream service did not answer", Err: err})
		},
	}
	return h, nil
}

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
	// Every path is the proxy's one route: "/" (as a catch-all pattern of
	// http.ServeMux would be named).
	r, tr := h.tel.Start(r, "/")
	sw := &middleware.StatusWriter{ResponseWriter: w}
	if h.cfg.ForwardAuth != "" {
		h.forwardAuth(sw, r, start, tr)
		return
	}
	StripAgentHeaders(r.Header)
	if err := middleware.CheckPath(r.URL); err != nil {
		h.cfg.Verifier.WriteError(sw, r, err)
		h.observe(r, sw.Status, h.refusedBefore(r, err, false), nil, nil, start, tr)
		return
	}
	res := h.cfg.Verifier.Check(r)
	if !res.Passed {
		h.cfg.Verifier.WriteError(sw, r, res.Err)
		h.observe(r, sw.Status, res, nil, nil, start, tr)
		return
	}
	if h.cfg.Decide != nil {
		if refusal := h.cfg.Decide(sw, r, res); refusal != nil {
			if sw.Status == 0 { // a Decide that wrote nothing still refuses
				middleware.WriteError(sw, r, refusal)
			}
			h.observe(r, sw.Status, res, refusal, nil, start, tr)
			return
		}
	}
	st := &requestState{res: res}
	h.proxy.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
	h.observe(r, sw.Status, res, nil, st.upstreamErr, start, tr)
}

// refusedBefore is the Result of a request refused (or, passed, let
// through) before the verifier saw it; Config.OnRefuse hears of a
// refusal.
func (h *Handler) refusedBefore(r *http.Request, err *middleware.Error, passed bool) *middleware.Result {
	res := &middleware.Result{Request: r, Outcome: err.Outcome(), Reason: err.Code.Reason(), Err: err, Passed: passed}
	if !passed && h.cfg.OnRefuse != nil {
		h.cfg.OnRefuse(res)
	}
	return res
}

// observe counts and logs one answer and ends its span tr; r is the
// original request (in forward-auth, once rebuilt), refusal the error of
// Config.Decide's refusal (nil if none).
func (h *Handler) observe(r *http.Request, status int, res *middleware.Result, refusal *middleware.Error, upstreamErr error, start time.Time, tr *telemetry.Request) {
	if status == 0 {
		status = http.StatusOK
	}
	tr.End(status, res)
	if m := h.cfg.Metrics; m != nil {
		m.ObserveRequest(h.route, r.Method, status)
	}
	if l := h.cfg.AccessLog; l != nil {
		// Room for every attribute below, so that the appends never grow
		// (and copy) the slice.
		attrs := make([]slog.Attr, 0, 15)
		attrs = append(attrs,
			slog.String("method", r.Method), slog.String("host", r.Host), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		)
		if res != nil {
			attrs = append(attrs, slog.String("outcome", string(res.Outcome)), slog.String("verdict", Verdict(res.Outcome)))
			if refusal != nil {
				attrs = append(attrs, slog.String("reason", refusal.Code.Reason()), slog.String("code", string(refusal.Code)))
			} else if res.Err != nil {
				attrs = append(attrs, slog.String("reason", reasonOf(res)), slog.String("code", string(res.Err.Code)))
			}
			if res.Outcome == middleware.OutcomeVerified {
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
		if sc := trace.SpanContextFromContext(r.Context()); sc.HasTraceID() {
			attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
		}
		l.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	}
}
