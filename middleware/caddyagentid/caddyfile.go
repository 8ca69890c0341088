package caddyagentid

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/agentid/agentid/signer/suggest"
)

func init() {
	httpcaddyfile.RegisterDirective("agentid", parseCaddyfile)
	// Among the authentication handlers, before basic_auth and
	// forward_auth: after request_body (its size limit applies to the
	// body the verifier reads for Content-Digest) and after the rewrites
	// (the verifier reads the request as the client sent it anyway).
	httpcaddyfile.RegisterDirectiveOrder("agentid", httpcaddyfile.Before, "basic_auth")
}

// parseCaddyfile reads the agentid directive into its route. Without a
// matcher the route is the handler alone. With one (agentid @api {…},
// agentid /api/* {…}) the matcher decides which requests are verified,
// but not whether the client's X-Agent-* headers reach the service: the
// route is then a subroute that runs agentid_strip (StripHandler) on
// every request and the handler on those the matcher selects, so a
// request the matcher skips goes on without the client's X-Agent-*
// headers and trailers instead of carrying them to the service as if the
// module had set them.
func parseCaddyfile(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	if !h.Next() {
		return nil, h.ArgErr()
	}
	matcherSet, err := h.ExtractMatcherSet()
	if err != nil {
		return nil, err
	}
	m := new(Handler)
	if err := m.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	if matcherSet == nil {
		return h.NewRoute(nil, m), nil
	}
	var warnings []caddyconfig.Warning
	sub := &caddyhttp.Subroute{Routes: caddyhttp.RouteList{
		{HandlersRaw: []json.RawMessage{caddyconfig.JSONModuleObject(StripHandler{}, "handler", "agentid_strip", &warnings)}},
		{MatcherSetsRaw: []caddy.ModuleMap{matcherSet}, HandlersRaw: []json.RawMessage{caddyconfig.JSONModuleObject(m, "handler", "agentid", &warnings)}},
	}}
	if len(warnings) > 0 {
		return nil, h.Errf("agentid: %s", warnings[0].Message)
	}
	return h.NewRoute(nil, sub), nil
}

// UnmarshalCaddyfile reads the agentid directive, whose subdirectives are
// the fields of Handler (the keys of idcli proxy's YAML file) by their
// JSON names:
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
//		cache key_sets|key_sets_on_probation|key_sets_per_site|signature_agents|expanded_keys N
//	}
//
// A flag takes no value, a string or number one, a list one or more (and
// may be repeated); route (one entry of routes) takes a prefix and a mode;
// a block (allow, deny, limits, cache) takes the name of one of its keys
// and that key's value(s). authorities and trust are required (here or in
// config_file). Values are checked when the handler is provisioned, by
// the same code as idcli proxy's.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	hv := reflect.ValueOf(h).Elem()
	for d.NextBlock(0) {
		sub := d.Val()
		args := d.RemainingArgs()
		name := sub
		if name == "route" {
			name = "routes"
		}
		f, ok := fieldByJSON(hv, name)
		if !ok || sub == "routes" {
			return d.Errf("agentid: unknown subdirective %q%s (want %s)", sub, didYouMean(sub, subdirectives()), orList(subdirectives()))
		}
		if err := setValue(d, sub, f, args); err != nil {
			return err
		}
	}
	return nil
}

// subdirectives are the Caddyfile's subdirectives: the JSON names of
// Handler's fields, in order, but "route" for routes (one entry each).
var subdirectives = sync.OnceValue(func() []string {
	out := keyNames(reflect.TypeFor[Handler]())
	out[slices.Index(out, "routes")] = "route"
	return out
})

// fieldByJSON returns the field of struct v named name in the JSON
// config.
func fieldByJSON(v reflect.Value, name string) (reflect.Value, bool) {
	for i := range v.NumField() {
		if jsonName(v.Type().Field(i)) == name && name != "" {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// jsonName is the name of f in the JSON config, "" if none.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if !f.IsExported() || name == "-" {
		return ""
	}
	return name
}

// keyNames are the JSON names of the fields of struct type t.
func keyNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := jsonName(t.Field(i)); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// setValue puts the Caddyfile values args of the subdirective (or block
// key) name into v, by v's kind.
func setValue(d *caddyfile.Dispenser, name string, v reflect.Value, args []string) error {
	n := func(want int) error {
		if len(args) != want {
			return d.Errf("agentid: %s takes %d value(s), got %d", name, want, len(args))
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Bool:
		if err := n(0); err != nil {
			return err
		}
		v.SetBool(true)
	case reflect.String:
		if err := n(1); err != nil {
			return err
		}
		v.SetString(args[0])
	case reflect.Int:
		if err := n(1); err != nil {
			return err
		}
		i, err := strconv.Atoi(args[0])
		if err != nil {
			return d.Errf("agentid: %s %q: want a whole number", name, args[0])
		}
		v.SetInt(int64(i))
	case reflect.Slice:
		if v.Type().Elem() == reflect.TypeFor[Route]() {
			if err := n(2); err != nil {
				return err
			}
			v.Set(reflect.Append(v, reflect.ValueOf(Route{Prefix: args[0], Mode: args[1]})))
			return nil
		}
		if len(args) == 0 {
			return d.Errf("agentid: %s needs at least one value", name)
		}
		v.Set(reflect.AppendSlice(v, reflect.ValueOf(args)))
	case reflect.Pointer: // a block: allow, deny, limits, cache
		keys := keyNames(v.Type().Elem())
		if len(args) < 2 {
			return d.Errf("agentid: %s wants a key (%s) and its value", name, orList(keys))
		}
		if !slices.Contains(keys, args[0]) {
			return d.Errf("agentid: %s %q: not a key of %s%s (want %s)", name, args[0], name, didYouMean(args[0], keys), orList(keys))
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		f, _ := fieldByJSON(v.Elem(), args[0])
		return setValue(d, name+" "+args[0], f, args[1:])
	}
	return nil
}

// orList writes names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// didYouMean suggests the names close to typed (suggest.Close), worded
// as Caddyfile errors are.
func didYouMean(typed string, names []string) string {
	near := suggest.Close(typed, names)
	if len(near) == 0 {
		return ""
	}
	return ": did you mean " + strings.Join(near, " or ") + "?"
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*Handler)(nil)
