package proxyconfig

import (
	"gopkg.in/yaml.v3"

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
// (defaults included) and secrets masked: what `idcli proxy --check`
// prints. It parses back to the same configuration, but for the secrets.
func (c *Config) Effective() string {
	m := c.Masked()
	b, err := yaml.Marshal(m)
	if err != nil { // a Config holds only strings, numbers, booleans and lists
		return "# " + err.Error() + "\n"
	}
	return string(b)
}
