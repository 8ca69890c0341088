package caddyagentid

import (
	"io"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/agentid/agentid/middleware/proxy"
)

func init() {
	caddy.RegisterModule(StripHandler{})
}

// StripHandler is the module http.handlers.agentid_strip: it removes the
// client's X-Agent-* headers and trailers (in any spelling, as the
// agentid handler does) and the Connection tokens naming them, and passes
// every request on. It has no settings.
//
// The Caddyfile puts it before the agentid handler whenever the directive
// has a matcher, so that the requests the matcher skips do not carry a
// client's X-Agent-Uid to the service. A JSON config whose agentid route
// has a "match" needs it too: an unmatched route with
// {"handler": "agentid_strip"} before that route.
type StripHandler struct{}

// CaddyModule returns the Caddy module information.
func (StripHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.agentid_strip",
		New: func() caddy.Module { return new(StripHandler) },
	}
}

// ServeHTTP removes the client's X-Agent-* headers from r and calls next.
func (StripHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	stripClient(r)
	return next.ServeHTTP(w, r)
}

// stripClient removes what a client sent under our names: its X-Agent-*
// headers in any spelling (proxy.IsAgentHeader), the tokens of its
// Connection header naming them, and its X-Agent-* trailers, declared or
// read with the body.
func stripClient(r *http.Request) {
	proxy.StripAgentHeaders(r.Header)
	dropConnectionTokens(r.Header)
	proxy.StripAgentHeaders(r.Trailer)
	if r.Body != nil && r.Body != http.NoBody {
		if _, ok := r.Body.(*trailerStripper); !ok {
			r.Body = &trailerStripper{ReadCloser: r.Body, r: r}
		}
	}
}

// trailerStripper removes the X-Agent-* trailers of r when its body has
// been read to the end, which is when net/http fills in r.Trailer and
// reverse_proxy copies them to the upstream request.
type trailerStripper struct {
	io.ReadCloser
	r *http.Request
}

func (b *trailerStripper) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		proxy.StripAgentHeaders(b.r.Trailer)
	}
	return n, err
}

// dropConnectionTokens removes from Connection the tokens naming X-Agent-*
// headers: reverse_proxy deletes the headers Connection names after this
// handler ran, so a client's "Connection: X-Agent-Uid" would otherwise
// remove the identity the agentid handler sets.
func dropConnectionTokens(h http.Header) {
	values, ok := h["Connection"]
	if !ok {
		return
	}
	kept := values[:0:0]
	for _, v := range values {
		var tokens []string
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" && !proxy.IsAgentHeader(t) {
				tokens = append(tokens, t)
			}
		}
		if len(tokens) > 0 {
			kept = append(kept, strings.Join(tokens, ", "))
		}
	}
	if len(kept) == 0 {
		delete(h, "Connection")
		return
	}
	h["Connection"] = kept
}

// Interface guard.
var _ caddyhttp.MiddlewareHandler = StripHandler{}
