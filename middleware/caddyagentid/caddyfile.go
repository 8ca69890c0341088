package caddyagentid

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/agentid/agentid/middleware/proxy/proxyconfig"
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

// subdirectives lists the Caddyfile's subdirectives, for errors.
const subdirectives = "config_file, authorities, trust, allow_http, allow_private, registries, agentid_services, mode, profile, refusal_status, redis_url, route, allow, deny or limits"

// UnmarshalCaddyfile reads the agentid directive, whose subdirectives are
// the keys of idcli proxy's YAML file:
//
//	agentid {
//		config_file /etc/agentid/proxy.yaml
//		authorities HOST[:PORT]|*.SUFFIX…
//		trust HOST[:PORT]|HOST:*|*.SUFFIX…
//		allow_http
//		allow_private
//		registries URL…
//		agentid_services URL…
//		mode required|optional|observe
//		profile deployed|strict-01
//		refusal_status 401|403
//		redis_url URL
//		route PREFIX required|optional|observe
//		allow identities|hosts|uids VALUE…
//		deny identities|hosts|uids|cards VALUE…
//		limits agent|address|key_header|buckets_per_agent|redis_prefix|trusted_proxies|client_addr_header VALUE…
//	}
//
// authorities and trust are required (here or in config_file). List
// subdirectives may be repeated. Values are checked when the handler is
// provisioned, by the same code as idcli proxy's.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		sub := d.Val()
		args := d.RemainingArgs()
		n := func(want int) error {
			if len(args) != want {
				return d.Errf("agentid: %s takes %d value(s), got %d", sub, want, len(args))
			}
			return nil
		}
		list := func(dst *[]string) error {
			if len(args) == 0 {
				return d.Errf("agentid: %s needs at least one value", sub)
			}
			*dst = append(*dst, args...)
			return nil
		}
		one := func(dst *string) error {
			err := n(1)
			if err == nil {
				*dst = args[0]
			}
			return err
		}
		flag := func(dst *bool) error {
			err := n(0)
			*dst = err == nil
			return err
		}
		var err error
		switch sub {
		case "config_file":
			err = one(&h.ConfigFile)
		case "authorities":
			err = list(&h.Authorities)
		case "trust":
			err = list(&h.Trust)
		case "allow_http":
			err = flag(&h.AllowHTTP)
		case "allow_private":
			err = flag(&h.AllowPrivate)
		case "registries":
			err = list(&h.Registries)
		case "agentid_services":
			err = list(&h.AgentidServices)
		case "mode":
			err = one(&h.Mode)
		case "profile":
			err = one(&h.Profile)
		case "redis_url":
			err = one(&h.RedisURL)
		case "refusal_status":
			var s string
			if err = one(&s); err == nil {
				if h.RefusalStatus, err = strconv.Atoi(s); err != nil {
					err = d.Errf("agentid: refusal_status %q: want 401 or 403", s)
				}
			}
		case "route":
			if err = n(2); err == nil {
				h.Routes = append(h.Routes, Route{Prefix: args[0], Mode: args[1]})
			}
		case "allow", "deny":
			err = h.policy(d, sub, args)
		case "limits":
			err = h.limits(d, args)
		default:
			err = d.Errf("agentid: unknown subdirective %q%s (want %s)", sub, didYouMean(sub), subdirectives)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// didYouMean suggests the subdirectives close to typed.
func didYouMean(typed string) string {
	near := proxyconfig.CloseTo(typed, strings.Split(strings.ReplaceAll(subdirectives, " or ", ", "), ", "))
	if len(near) == 0 {
		return ""
	}
	return ": did you mean " + strings.Join(near, " or ") + "?"
}

// policy reads allow or deny: a list name and its values.
func (h *Handler) policy(d *caddyfile.Dispenser, sub string, args []string) error {
	if len(args) < 2 {
		return d.Errf("agentid: %s wants identities, hosts, uids or cards, and at least one value", sub)
	}
	p := &h.Allow
	if sub == "deny" {
		p = &h.Deny
	}
	if *p == nil {
		*p = new(Policy)
	}
	switch args[0] {
	case "identities":
		(*p).Identities = append((*p).Identities, args[1:]...)
	case "hosts":
		(*p).Hosts = append((*p).Hosts, args[1:]...)
	case "uids":
		(*p).UIDs = append((*p).UIDs, args[1:]...)
	case "cards":
		(*p).Cards = append((*p).Cards, args[1:]...)
	default:
		return d.Errf("agentid: %s %q: want identities, hosts, uids or cards", sub, args[0])
	}
	return nil
}

// limits reads one limits key and its value(s).
func (h *Handler) limits(d *caddyfile.Dispenser, args []string) error {
	if len(args) < 2 {
		return d.Errf("agentid: limits wants a key (agent, address, key_header, buckets_per_agent, redis_prefix, trusted_proxies or client_addr_header) and its value")
	}
	if h.Limits == nil {
		h.Limits = new(Limits)
	}
	l := h.Limits
	one := map[string]*string{"agent": &l.Agent, "address": &l.Address, "key_header": &l.KeyHeader,
		"redis_prefix": &l.RedisPrefix, "client_addr_header": &l.ClientAddrHeader}
	switch dst, ok := one[args[0]]; {
	case ok && len(args) == 2:
		*dst = args[1]
	case args[0] == "buckets_per_agent" && len(args) == 2:
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return d.Errf("agentid: limits buckets_per_agent %q: want a whole number", args[1])
		}
		l.BucketsPerAgent = n
	case args[0] == "trusted_proxies":
		l.TrustedProxies = append(l.TrustedProxies, args[1:]...)
	default:
		return d.Errf("agentid: limits %s: want agent, address, key_header, buckets_per_agent, redis_prefix or client_addr_header with one value, or trusted_proxies with several", args[0])
	}
	return nil
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*Handler)(nil)
