package main

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer/agent"
	"github.com/agentid/agentid/signer/envfile"
)

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
	return hint.Refused(err, raw)
}

// localSchemeHint returns, when raw is a host on this machine written
// without a scheme (localhost:3000, 127.0.0.1:3000, x.localhost), that
// https:// was used for it and fix(the http:// URL); else "".
func localSchemeHint(raw string, fix func(httpURL string) string) string {
	if raw == "" || strings.Contains(raw, "://") {
		return ""
	}
	with := hint.WithScheme(raw)
	if !strings.HasPrefix(with, "http://") {
		return ""
	}
	return raw + " has no scheme, so https://" + raw + " was used, but a local server speaks plain HTTP: " + fix(with)
}
