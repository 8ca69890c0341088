//go:build agentid_stdlib_ed25519

package middleware_test

// expandedKeysCached: with the standard library's Ed25519 there is no
// expanded form, so a signer.ExpandedKeys cache stays empty.
const expandedKeysCached = false
