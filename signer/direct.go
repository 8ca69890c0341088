package signer

import (
	"fmt"
	"strings"
)

// ParseDirectKeySetURL resolves a Signature-Agent URL the way
// web-bot-auth protocol-01 does: the value is a JWK Set URI fetched exactly
// as sent, with nothing appended. It must carry its scheme (http or https);
// the scheme and host are normalized as ParseKeySetURL does, and an origin
// without a path means its root, "/". Only the well-known directory path,
// when sent, makes the set WellKnown (a keyid must then be the key's
// thumbprint). Errors wrap ErrInvalidSignatureAgent.
func ParseDirectKeySetURL(s string) (KeySet, error) {
	i := strings.Index(s, "://")
	if i < 0 {
		return KeySet{}, fmt.Errorf("%w: %q is not an absolute URL (no scheme)", ErrInvalidSignatureAgent, Truncate(s))
	}
	ks, err := ParseKeySetURL(s)
	if err != nil {
		return KeySet{}, err
	}
	rest := s[i+3:]
	path := ""
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		path = rest[j:]
	}
	if path == "" || path == "/" {
		ks.URL = ks.URL[:ks.origin] + "/"
		ks.WellKnown = false
	}
	return ks, nil
}
