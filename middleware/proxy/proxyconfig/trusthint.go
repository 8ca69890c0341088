package proxyconfig

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// maxTrustHints bounds the hosts trustHints logs: the host comes from the
// request's Signature-Agent, so a client choosing new hosts gets at most
// this many lines into the log.
const maxTrustHints = 64

// trustHints logs, at warning level (seen at the default level), why an
// agent's key set was refused by the trust patterns, once per host: the
// host, the patterns, and when a pattern names the host but not its port,
// the pattern to write instead. Without it, the reason shows only at
// debug level, in the verifier's line for each refusal.
type trustHints struct {
	logger *slog.Logger
	key    string // how the setting is named: --trust or trust.hosts
	mu     sync.Mutex
	seen   map[string]bool
}

func (h *trustHints) observe(res middleware.Result) {
	if res.Err == nil || res.Err.Code != middleware.CodeUntrustedAgent {
		return
	}
	var ue *keyfetch.UntrustedError
	if !errors.As(res.Err.Err, &ue) || ue.Reason != keyfetch.ReasonUntrustedHost {
		return
	}
	host := signer.Truncate(ue.Host)
	h.mu.Lock()
	if h.seen[host] || len(h.seen) >= maxTrustHints {
		h.mu.Unlock()
		return
	}
	h.seen[host] = true
	h.mu.Unlock()
	h.logger.Warn("signature agent refused by the trust patterns (logged once per host)",
		"host", host, h.key, strings.Join(ue.Patterns, ", "), "hint", trustHint(h.key, ue.Host, ue.Patterns))
}

// trustHint says which pattern nearly matched host (host[:port]) and what
// to write instead, or how to trust it.
func trustHint(key, host string, patterns []string) string {
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		name, port = host, ""
	}
	name = strings.ToLower(name)
	for _, p := range patterns {
		if strings.Contains(p, ":") {
			continue
		}
		lp := strings.ToLower(p)
		if port != "" && (lp == name || strings.HasPrefix(lp, "*.") && strings.HasSuffix(name, lp[1:])) {
			return key + " " + p + " matches " + name + " on the scheme's default port only, not :" + port +
				": write " + p + ":* (any port) or " + name + ":" + port
		}
	}
	return "no pattern names " + host + ": add " + key + " " + host + " (or a *.suffix pattern covering it) if you trust its agents"
}
