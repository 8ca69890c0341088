// Package proxy puts the verifier (package middleware) in front of a
// service written in any language: as a reverse proxy that forwards
// verified requests upstream with the agent's identity in X-Agent-*
// headers, or as the forward-auth endpoint of nginx (auth_request),
// Traefik (ForwardAuth) or Caddy (forward_auth). idcli proxy and the
// Caddy module build it from their configuration (package proxyconfig).
//
//	v, _ := middleware.New(middleware.Config{Keys: keys, Mode: middleware.Optional})
//	h, _ := proxy.New(proxy.Config{Verifier: v, Upstream: upstreamURL, Services: []string{"https://agentid.example"}})
//	http.ListenAndServe(":8080", h)
//
// A client can neither claim an identity nor strip the proxy's: every
// incoming X-Agent-* header, in any spelling, is removed, and the proxy's
// own are set after hop-by-hop removal (SetAgentHeaders). A request whose
// path is not normal (middleware.CheckPath) is refused before it is
// verified, so the path the rules matched is the path the service reads.
// Config.Decide gives an owner's rules (package rules) the last word; the
// access log has one line per request, with the answer its client got.
// docs/proxy.md has the headers, the modes and each front's setup.
package proxy
