package otelon

import "go.opentelemetry.io/otel/attribute"

// The attributes of a verification, on the verifier's span and metric and
// on a server span (package middleware/telemetry): one set of names.
const (
	AttrOutcome = attribute.Key("agentid.outcome")
	AttrReason  = attribute.Key("agentid.reason")
	AttrAgent   = attribute.Key("agentid.agent")
	AttrUID     = attribute.Key("agentid.uid")
	AttrKeyID   = attribute.Key("agentid.keyid")
)

// MaxAttrLen bounds a value a span carries that a client or an agent
// chose (an identity, a keyid, a path, a host).
const MaxAttrLen = 256

// Bound cuts s to MaxAttrLen bytes.
func Bound(s string) string {
	if len(s) > MaxAttrLen {
		return s[:MaxAttrLen]
	}
	return s
}

// ResultAttrs appends to dst a verification's outcome and reason and, when
// verified, the agent's identity and keyid (bounded) and its uid if it has
// one.
func ResultAttrs(dst []attribute.KeyValue, outcome, reason string, verified bool, agent, keyID, uid string) []attribute.KeyValue {
	dst = append(dst, AttrOutcome.String(outcome), AttrReason.String(reason))
	if !verified {
		return dst
	}
	dst = append(dst, AttrAgent.String(Bound(agent)), AttrKeyID.String(Bound(keyID)))
	if uid != "" {
		dst = append(dst, AttrUID.String(uid))
	}
	return dst
}
