package main

import (
	"errors"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/envfile"
)

// hintError is an error followed, on its own line, by what to do about it.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + "\nhint: " + e.hint }
func (e *hintError) Unwrap() error { return e.err }

// withHint returns err followed by hint, or err alone when hint is "".
func withHint(err error, hint string) error {
	if err == nil || hint == "" {
		return err
	}
	return &hintError{err: err, hint: hint}
}

// serverWords returns err as the user reads it when it carries a
// service's refusal (*agent.ServerError): the service's answer, without
// the package prefixes of the errors around it ("agent: server answered
// 403 forbidden: …" is "server answered 403 forbidden: …"), as a client
// message is (middleware.ClientMessage). Any other error is returned as
// it is.
func serverWords(err error) error {
	var se *agent.ServerError
	if err == nil || !errors.As(err, &se) {
		return err
	}
	return &wordedError{text: middleware.ClientMessage(err), err: err}
}

// wordedError is err with the text the user reads.
type wordedError struct {
	text string
	err  error
}

func (e *wordedError) Error() string { return e.text }
func (e *wordedError) Unwrap() error { return e.err }

// refusedHint returns a hint for err when it is a refused connection (no
// process listens at the address): it names the address dialed, taken
// from err's URL (or from fallbackURL), and the command that starts a
// server. It returns "" for any other error.
func refusedHint(err error, fallbackURL string) string {
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return ""
	}
	raw := fallbackURL
	var ue *url.Error
	if errors.As(err, &ue) {
		raw = ue.URL
	}
	addr := raw
	if u, perr := url.Parse(raw); perr == nil && u.Host != "" {
		addr = u.Host
		if u.Port() == "" {
			port := "443"
			if u.Scheme == "http" {
				port = "80"
			}
			addr = net.JoinHostPort(u.Hostname(), port)
		}
	}
	return "nothing is listening at " + addr + " (connection refused): start the server with idcli server start, or check the URL"
}

// agentHostname returns the service hostname an agent command uses, as
// the user wrote it: the --hostname flag, else AGENT_HOSTNAME from the
// environment, else from ./.env; "" when none is set (the default).
func agentHostname(env *cliEnv, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := env.Getenv(agent.EnvHostname); v != "" {
		return v
	}
	if f, err := envfile.Read(filepath.Join(env.Dir, ".env")); err == nil {
		if v, ok := f.Get(agent.EnvHostname); ok {
			return v
		}
	}
	return ""
}

// serviceHint explains err, a failed registration or rotation at the
// service hostname raw (as agentHostname returns it): a local host written
// without a scheme was reached with https://, which a local server does not
// speak; a refused connection names the address.
func serviceHint(raw string, err error) string {
	raw = strings.TrimSpace(raw)
	if h := localSchemeHint(raw, func(with string) string { return "use --hostname " + with + " (or AGENT_HOSTNAME=" + with + ")" }); h != "" {
		return h
	}
	if raw == "" {
		raw = agent.DefaultHostname
	}
	return refusedHint(err, raw)
}

// localSchemeHint returns, when raw is a host on this machine written
// without a scheme (localhost:3000, 127.0.0.1:3000, x.localhost), that
// https:// was used for it and fix(the http:// URL); else "".
func localSchemeHint(raw string, fix func(httpURL string) string) string {
	if raw == "" || strings.Contains(raw, "://") {
		return ""
	}
	with := withScheme(raw)
	if !strings.HasPrefix(with, "http://") {
		return ""
	}
	return raw + " has no scheme, so https://" + raw + " was used, but a local server speaks plain HTTP: " + fix(with)
}
