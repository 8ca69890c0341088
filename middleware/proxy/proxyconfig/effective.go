package proxyconfig

import (
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"
)

// Masked returns a copy of c whose secrets are hidden: the password (and
// user) of every URL, such as redis://:PASSWORD@host:6379, reads "xxxxx".
func (c *Config) Masked() *Config {
	d := c.Clone()
	d.RedisURL = maskURL(d.RedisURL)
	for i, s := range d.Trust.Registries {
		d.Trust.Registries[i] = maskURL(s)
	}
	for i, s := range d.AgentidServices {
		d.AgentidServices[i] = maskURL(s)
	}
	d.Upstream = maskURL(d.Upstream)
	return d
}

// maskURL hides the userinfo of s when it is a URL with one. A string that
// does not parse but holds an '@' is hidden whole up to it.
func maskURL(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		at := strings.LastIndexByte(s, '@')
		scheme := ""
		if i := strings.Index(s, "://"); i >= 0 && i < at {
			scheme = s[:i+3]
		}
		return scheme + "xxxxx" + s[at:]
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	} else {
		u.User = url.User("xxxxx")
	}
	return u.String()
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
