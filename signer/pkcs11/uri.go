// Package pkcs11 signs with an Ed25519 key held in a PKCS#11 token (an HSM,
// a smart card, SoftHSM), whose private half never leaves the token.
//
//	u, err := pkcs11.ParseURI("pkcs11:token=bots;object=crawler?module-path=/usr/lib/softhsm/libsofthsm2.so", os.Getenv)
//	k, err := pkcs11.Open(u)            // or pkcs11.Generate(u) for a new key on the token
//	defer k.Close()
//	key, err := signer.NewSignerKey(k)  // signs like any other signer.PrivateKey
//
// Keys are found by token label (token=), object label (object=) and, when
// given, CKA_ID (id=). Generated keys are token objects with CKA_SENSITIVE
// true and CKA_EXTRACTABLE false. The package needs cgo; built without it,
// Open and Generate return ErrNoCgo.
package pkcs11

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/agentid/agentid/signer"
)

// EnvPIN is the variable that holds the user PIN when the URI has no
// pin-value.
const EnvPIN = "AGENT_PKCS11_PIN"

// EnvModule is the variable that names the PKCS#11 module when the URI has
// no module-path.
const EnvModule = "AGENT_PKCS11_MODULE"

// ErrNoCgo is returned by Open and Generate in a binary built without cgo,
// which cannot load a PKCS#11 module.
var ErrNoCgo = errors.New("pkcs11: this binary was built without cgo and cannot load a PKCS#11 module")

// ErrNoKey is wrapped by Open's error when no private key in the token
// matches the URI.
var ErrNoKey = errors.New("pkcs11: no matching key")

// URI names a key in a token, after RFC 7512:
// pkcs11:token=<label>;object=<label>[;id=<%xx bytes>]?module-path=<path>[&pin-value=<pin>].
type URI struct {
	// Token is the token label (token=). Required.
	Token string
	// Object is the key's label (object=). Required.
	Object string
	// ID is the key's CKA_ID (id=), or nil to match any.
	ID []byte
	// ModulePath is the PKCS#11 module to load (module-path=, else
	// AGENT_PKCS11_MODULE). Required.
	ModulePath string
	// PIN is the user PIN (pin-value=, else AGENT_PKCS11_PIN). It is never
	// printed by String.
	PIN string
}

// String returns the URI without its PIN.
func (u URI) String() string {
	var b strings.Builder
	b.WriteString("pkcs11:token=" + escape(u.Token) + ";object=" + escape(u.Object))
	if u.ID != nil {
		b.WriteString(";id=")
		for _, c := range u.ID {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if u.ModulePath != "" {
		b.WriteString("?module-path=" + escape(u.ModulePath))
	}
	return b.String()
}

// GoString is String, so %#v never prints the PIN either.
func (u URI) GoString() string { return u.String() }

func escape(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), ";", "%3B")
}

// ParseURI parses a pkcs11: URI. A PIN absent from the URI is read from
// AGENT_PKCS11_PIN and a module absent from it from AGENT_PKCS11_MODULE,
// through getenv (nil means no environment). Errors never contain the PIN.
func ParseURI(s string, getenv func(string) string) (URI, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	rest, ok := strings.CutPrefix(s, "pkcs11:")
	if !ok {
		return URI{}, errors.New(`pkcs11: invalid URI: want "pkcs11:token=…;object=…?module-path=…"`)
	}
	path, query, _ := strings.Cut(rest, "?")
	var u URI
	seen := map[string]bool{}
	for _, attr := range strings.Split(path, ";") {
		if attr == "" {
			continue
		}
		k, v, ok := strings.Cut(attr, "=")
		if !ok {
			return URI{}, fmt.Errorf("pkcs11: invalid URI attribute %q: want name=value", signer.Truncate(attr))
		}
		if seen[k] {
			return URI{}, fmt.Errorf("pkcs11: invalid URI: attribute %s given twice", k)
		}
		seen[k] = true
		val, err := url.PathUnescape(v)
		if err != nil {
			return URI{}, fmt.Errorf("pkcs11: invalid URI attribute %s: bad percent-encoding", k)
		}
		switch k {
		case "token":
			u.Token = val
		case "object":
			u.Object = val
		case "id":
			u.ID = []byte(val)
		case "type":
			if val != "private" {
				return URI{}, fmt.Errorf("pkcs11: invalid URI: type=%s, want private (the signing key)", signer.Truncate(val))
			}
		default:
			// RFC 7512 lets a consumer ignore attributes it does not know
			// only when they cannot change which object matches; refuse
			// rather than pick the wrong key.
			return URI{}, fmt.Errorf("pkcs11: URI attribute %q is not supported (token, object, id, type)", signer.Truncate(k))
		}
	}
	for _, q := range strings.Split(query, "&") {
		if q == "" {
			continue
		}
		k, v, _ := strings.Cut(q, "=")
		val, err := url.PathUnescape(v)
		if err != nil {
			return URI{}, fmt.Errorf("pkcs11: invalid URI query %s: bad percent-encoding", signer.Truncate(k))
		}
		switch k {
		case "module-path":
			u.ModulePath = val
		case "pin-value":
			u.PIN = val
		default:
			return URI{}, fmt.Errorf("pkcs11: URI query %q is not supported (module-path, pin-value)", signer.Truncate(k))
		}
	}
	if u.PIN == "" {
		u.PIN = getenv(EnvPIN)
	}
	if u.ModulePath == "" {
		u.ModulePath = getenv(EnvModule)
	}
	switch {
	case u.Token == "":
		return URI{}, errors.New("pkcs11: invalid URI: token= (the token label) is required")
	case u.Object == "":
		return URI{}, errors.New("pkcs11: invalid URI: object= (the key label) is required")
	case u.ModulePath == "":
		return URI{}, fmt.Errorf("pkcs11: invalid URI: no module: add ?module-path=/path/to/module.so or set %s", EnvModule)
	}
	return u, nil
}
