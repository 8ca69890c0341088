package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/pkcs11"
)

// envPKCS11URI is the variable read when --pkcs11-uri is not given.
const envPKCS11URI = "AGENT_PKCS11_URI"

// pkcs11URIUsage is the help of --pkcs11-uri.
const pkcs11URIUsage = "sign with an Ed25519 key in a PKCS#11 token instead of AGENT_PRIVATE_JWK: " +
	"pkcs11:token=T;object=O?module-path=M[&pin-value=P] (default: " + envPKCS11URI + "; PIN from " +
	pkcs11.EnvPIN + ", module from " + pkcs11.EnvModule + ")"

// pkcs11URIFlag registers --pkcs11-uri on fs.
func pkcs11URIFlag(fs *flag.FlagSet) *string {
	return fs.String("pkcs11-uri", "", pkcs11URIUsage)
}

// tokenKey is a key in a PKCS#11 token, opened for one command.
type tokenKey struct {
	uri pkcs11.URI
	tok *pkcs11.Key
	key signer.PrivateKey
}

// Close closes the token session; nil-safe.
func (k *tokenKey) Close() {
	if k != nil && k.tok != nil {
		k.tok.Close()
	}
}

// Signing returns the signing key, or the zero key (AGENT_PRIVATE_JWK is
// then used) when k is nil.
func (k *tokenKey) Signing() signer.PrivateKey {
	if k == nil {
		return signer.PrivateKey{}
	}
	return k.key
}

// pkcs11URI resolves the URI: the flag, then AGENT_PKCS11_URI; "" means
// no token.
func (env *cliEnv) pkcs11URI(flagValue string) (pkcs11.URI, bool, error) {
	raw := flagValue
	if raw == "" {
		raw = env.Getenv(envPKCS11URI)
	}
	if raw == "" {
		return pkcs11.URI{}, false, nil
	}
	u, err := pkcs11.ParseURI(raw, env.Getenv)
	if err != nil {
		return pkcs11.URI{}, false, fmt.Errorf("--pkcs11-uri: %w", err)
	}
	return u, true, nil
}

// openTokenKey opens the key the URI names (nil, nil without a URI).
// With create, a token without that key gets a new one (agent init).
func (env *cliEnv) openTokenKey(flagValue string, create bool) (*tokenKey, error) {
	u, ok, err := env.pkcs11URI(flagValue)
	if err != nil || !ok {
		return nil, err
	}
	tok, err := pkcs11.Open(u)
	if create && errors.Is(err, pkcs11.ErrNoKey) {
		tok, err = pkcs11.Generate(u)
	}
	if err != nil {
		return nil, err
	}
	return wrapToken(u, tok)
}

func wrapToken(u pkcs11.URI, tok *pkcs11.Key) (*tokenKey, error) {
	key, err := signer.NewSignerKey(tok)
	if err != nil {
		tok.Close()
		return nil, err
	}
	return &tokenKey{uri: u, tok: tok, key: key}, nil
}

// rotateTokenKeys opens the current key the URI names and generates the
// next one on the same token (nil, nil, nil without a URI). finish(ok)
// destroys the key that lost: the new one when the rotation failed, the
// old one (revoked by then) when it succeeded, and closes both.
func (env *cliEnv) rotateTokenKeys(flagValue string) (cur, next *tokenKey, finish func(ok bool) error, err error) {
	cur, err = env.openTokenKey(flagValue, false)
	if err != nil || cur == nil {
		return nil, nil, func(bool) error { return nil }, err
	}
	tok, err := pkcs11.Generate(cur.uri)
	if err != nil {
		cur.Close()
		return nil, nil, nil, err
	}
	if next, err = wrapToken(cur.uri, tok); err != nil {
		tok.Destroy()
		cur.Close()
		return nil, nil, nil, err
	}
	finish = func(ok bool) error {
		defer cur.Close()
		defer next.Close()
		if ok {
			if err := cur.tok.Destroy(); err != nil {
				return fmt.Errorf("the old key (revoked) is still on the token: %w; delete it, or add id=%s to the URI", err, pctEncode(next.tok.ID()))
			}
			return nil
		}
		return next.tok.Destroy()
	}
	return cur, next, finish, nil
}

// pctEncode writes b as RFC 7512 percent-encoded bytes (%AB%CD…).
func pctEncode(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		fmt.Fprintf(&sb, "%%%02X", c)
	}
	return sb.String()
}
