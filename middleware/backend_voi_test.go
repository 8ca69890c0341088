//go:build !agentid_stdlib_ed25519

package middleware_test

// expandedKeysCached: the default Ed25519 backend (curve25519-voi) keeps
// expanded keys in a signer.ExpandedKeys cache.
const expandedKeysCached = true
