package proxyconfig

import (
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/agentlimit"
	"github.com/agentid/agentid/middleware/clientaddr"
	"github.com/agentid/agentid/middleware/redisstore"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/redact"
)

// Masked returns a copy of c whose secrets are hidden: every URL (upstream,
// redis_url, trust.registries, agentid_services) as redact.URL writes it,
// its user information, query values and fragment reading "xxxxx".
func (c *Config) Masked() *Config {
	d := c.Clone()
	d.Upstream = redact.URL(d.Upstream)
	d.RedisURL = redact.URL(d.RedisURL)
	for i, s := range d.Trust.Registries {
		d.Trust.Registries[i] = redact.URL(s)
	}
	for i, s := range d.AgentidServices {
		d.AgentidServices[i] = redact.URL(s)
	}
	return d
}

// Effective returns the configuration in force as YAML, every key written
// with the value it takes, secrets masked: what `idcli proxy --check`
// prints. A key left at its default says so in a comment ("# default"),
// and a 0 or "" that stands for a default is written as that default
// (limits.buckets_per_agent: 64), or explained where it is the value in
// force (redis_url: "" # default: nonces in memory). It parses back to the
// same configuration, but for the secrets.
func (c *Config) Effective() string {
	var doc yaml.Node
	if err := doc.Encode(c.Masked()); err != nil { // a Config holds only strings, numbers, booleans and lists
		return "# " + err.Error() + "\n"
	}
	c.annotate(&doc, "")
	b, err := yaml.Marshal(&doc)
	if err != nil {
		return "# " + err.Error() + "\n"
	}
	return string(b)
}

// annotate writes onto the mapping n (the keys under path) the value in
// force of each key whose 0 or "" stands for a default, and the comment of
// each key at its default.
func (c *Config) annotate(n *yaml.Node, path string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i].Value, n.Content[i+1]
		if path != "" {
			key = path + "." + key
		}
		if val.Kind == yaml.MappingNode {
			c.annotate(val, key)
			continue
		}
		inForce, note, isDefault := c.inForce(key)
		if inForce != nil {
			var v yaml.Node
			if v.Encode(inForce) == nil {
				*val = v
			}
		}
		if isDefault && val.Kind == yaml.SequenceNode {
			val.Style |= yaml.FlowStyle // a comment after a block list lands on the next key
		}
		switch {
		case isDefault && note != "":
			val.LineComment = "default: " + note
		case isDefault:
			val.LineComment = "default"
		}
	}
}

// inForce returns, for the key path of c, the value in force when the
// key's own is a 0 or "" standing for another (else nil), what a value
// left empty means, and whether the key is at its default.
func (c *Config) inForce(path string) (value any, note string, isDefault bool) {
	v, ok := c.field(path)
	if !ok {
		return nil, "", false
	}
	d, _ := Default().field(path)
	zero := v.IsZero() || (v.Kind() == reflect.Slice && v.Len() == 0)
	isDefault = reflect.DeepEqual(v.Interface(), d.Interface()) || zero && d.IsZero()
	cacheKeySets := c.Cache.KeySets
	if cacheKeySets == 0 {
		cacheKeySets = keyfetch.DefaultMaxOrigins
	}
	standsFor := map[string]any{ // the value of a 0 or "" key
		"cache.key_sets":              keyfetch.DefaultMaxOrigins,
		"cache.key_sets_on_probation": cacheKeySets,
		"cache.key_sets_per_site":     keyfetch.DefaultMaxSetsPerSite,
		"cache.signature_agents":      middleware.DefaultSignatureAgentCacheSize,
		"cache.expanded_keys":         signer.DefaultExpandedKeyCacheSize,
		"limits.agent":                "off",
		"limits.address":              "off",
		"limits.buckets_per_agent":    agentlimit.DefaultBucketsPerAgent,
		"limits.redis_prefix":         redisstore.DefaultLimitPrefix,
	}
	if c.ForwardAuth {
		standsFor["forward_auth_from"] = []string{"127.0.0.0/8", "::1"}
	}
	if len(c.Limits.TrustedProxies) > 0 {
		standsFor["limits.client_addr_header"] = clientaddr.DefaultHeader
	}
	if path == "access_log" && zero {
		return "off", "", false // what the proxy makes of ""
	}
	if sf, ok := standsFor[path]; ok {
		if zero {
			return sf, "", true
		}
		return nil, "", isDefault || reflect.DeepEqual(v.Interface(), sf)
	}
	if !zero {
		return nil, "", isDefault
	}
	notes := map[string]string{ // what an empty key means
		"upstream":                  "none: forward_auth answers the auth subrequests of the front proxy",
		"front":                     "none: only with forward_auth",
		"forward_auth_from":         "none: only with forward_auth",
		"trust.registries":          "none",
		"agentid_services":          "none: no agent gets X-Agent-Uid",
		"redis_url":                 "nonces in memory, this process only",
		"metrics_listen":            "off: no /metrics nor /status",
		"routes":                    "none: mode applies to every path",
		"limits.key_header":         "one budget per agent",
		"limits.trusted_proxies":    "none: the peer's address is the client's",
		"limits.client_addr_header": clientaddr.DefaultHeader + ", read only from limits.trusted_proxies",
	}
	note = notes[path]
	if note == "" && (strings.HasPrefix(path, "allow.") || strings.HasPrefix(path, "deny.")) {
		note = "none"
	}
	return nil, note, isDefault
}
