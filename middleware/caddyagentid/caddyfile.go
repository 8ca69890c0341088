package caddyagentid

import (
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("agentid", parseCaddyfile)
	// Among the authentication handlers, before basic_auth and
	// forward_auth: after request_body (its size limit applies to the
	// body the verifier reads for Content-Digest) and after the rewrites
	// (the verifier reads the request as the client sent it anyway).
	httpcaddyfile.RegisterDirectiveOrder("agentid", httpcaddyfile.Before, "basic_auth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile reads the agentid directive:
//
//	agentid {
//		authority HOST[:PORT]|*.SUFFIX…
//		trust HOST[:PORT]|HOST:*|*.SUFFIX…
//		mode required|optional|observe
//		route PREFIX required|optional|observe
//		allow identity|host|uid VALUE…
//		deny identity|host|uid VALUE…
//		agentid_service URL…
//		registry URL…
//		redis_url URL
//		refusal_status 401|403
//		profile deployed|strict-01
//		allow_http
//		allow_private
//	}
//
// authority and trust are required. Subdirectives that take lists may be
// repeated. Values are checked when the handler is provisioned.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		sub := d.Val()
		args := d.RemainingArgs()
		need := func(n int) error {
			if len(args) != n {
				return d.Errf("agentid: %s takes %d value(s), got %d", sub, n, len(args))
			}
			return nil
		}
		some := func() error {
			if len(args) == 0 {
				return d.Errf("agentid: %s needs at least one value", sub)
			}
			return nil
		}
		var err error
		switch sub {
		case "authority":
			if err = some(); err == nil {
				h.Authorities = append(h.Authorities, args...)
			}
		case "trust":
			if err = some(); err == nil {
				h.Trust = append(h.Trust, args...)
			}
		case "mode":
			if err = need(1); err == nil {
				h.Mode = args[0]
			}
		case "route":
			if err = need(2); err == nil {
				h.Routes = append(h.Routes, Route{Prefix: args[0], Mode: args[1]})
			}
		case "allow", "deny":
			if len(args) < 2 {
				return d.Errf("agentid: %s wants identity, host or uid and at least one value", sub)
			}
			p := &h.Allow
			if sub == "deny" {
				p = &h.Deny
			}
			if *p == nil {
				*p = new(Policy)
			}
			switch args[0] {
			case "identity":
				(*p).Identities = append((*p).Identities, args[1:]...)
			case "host":
				(*p).Hosts = append((*p).Hosts, args[1:]...)
			case "uid":
				(*p).UIDs = append((*p).UIDs, args[1:]...)
			default:
				return d.Errf("agentid: %s %q: want identity, host or uid", sub, args[0])
			}
		case "agentid_service":
			if err = some(); err == nil {
				h.AgentidServices = append(h.AgentidServices, args...)
			}
		case "registry":
			if err = some(); err == nil {
				h.Registries = append(h.Registries, args...)
			}
		case "redis_url":
			if err = need(1); err == nil {
				h.RedisURL = args[0]
			}
		case "refusal_status":
			if err = need(1); err == nil {
				if h.RefusalStatus, err = strconv.Atoi(args[0]); err != nil {
					err = d.Errf("agentid: refusal_status %q: want 401 or 403", args[0])
				}
			}
		case "profile":
			if err = need(1); err == nil {
				h.Profile = args[0]
			}
		case "allow_http":
			if err = need(0); err == nil {
				h.AllowHTTP = true
			}
		case "allow_private":
			if err = need(0); err == nil {
				h.AllowPrivate = true
			}
		default:
			return d.Errf("agentid: unknown subdirective %q (want authority, trust, mode, route, allow, deny, agentid_service, registry, redis_url, refusal_status, profile, allow_http or allow_private)", sub)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*Handler)(nil)
