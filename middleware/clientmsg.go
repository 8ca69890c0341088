package middleware

import "strings"

// ClientMessage returns err's text as a client reads it: without the
// package prefixes ("signer: ", "keyfetch: ", …) that this module's errors
// carry for the log, wherever one stands in the chain of wrapped messages.
// A prefix is a segment that is exactly the name of one of the module's
// packages, at the start of the text or right after ": ":
//
//	"signer: invalid signature input: signer: field too large: …"
//	→ "invalid signature input: field too large: …"
//
// It is how a client message (Error.Message) is derived from an error's
// text, everywhere in the module; the error itself (Error.Err) keeps its
// prefixes for the log.
func ClientMessage(err error) string {
	if err == nil {
		return ""
	}
	return stripPrefixes(err.Error())
}

// packagePrefixes are the prefixes of the module's errors: the names of
// its packages (TestPackagePrefixes checks that each is here), and
// "agentid", the Caddy module's.
var packagePrefixes = map[string]bool{
	"adminapi": true, "agent": true, "agentid": true, "agentlimit": true, "asynclog": true, "caddyagentid": true, "clientaddr": true,
	"envfile": true, "telemetry": true, "idcli": true, "keyfetch": true, "lru": true, "metrics": true,
	"middleware": true, "otelon": true, "pkcs11": true, "policy": true, "proxy": true, "proxyconfig": true, "ratelimit": true,
	"redact": true, "redisstore": true, "refserver": true, "replaypg": true, "reqid": true, "rules": true,
	"signer": true, "status": true, "store": true, "suggest": true, "testenv": true, "webhook": true,
}

// stripPrefixes removes the package prefixes of s (see ClientMessage).
// It allocates only when there is one.
func stripPrefixes(s string) string {
	var b strings.Builder
	kept := 0 // s[:kept] is settled: written to b, or dropped
	for rest := s; ; {
		seg, after, found := strings.Cut(rest, ": ")
		if !found {
			break
		}
		if packagePrefixes[seg] {
			start := len(s) - len(rest)
			if b.Cap() == 0 {
				b.Grow(len(s))
			}
			b.WriteString(s[kept:start])
			kept = start + len(seg) + len(": ")
		}
		rest = after
	}
	if kept == 0 {
		return s
	}
	b.WriteString(s[kept:])
	return b.String()
}
