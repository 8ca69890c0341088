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

// String returns the URI without its PIN (and, through Redact, without
// anything a malformed value carries after a PIN attribute's name).
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
	return Redact(b.String())
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
	if strings.Contains(query, "?") {
		// A second "?" is almost always "…?module-path=M?pin-value=P": the
		// PIN would end up in the module path, and in its errors.
		return URI{}, errors.New(`pkcs11: invalid URI: a second "?": separate query attributes with "&" (?module-path=M&pin-value=P)`)
	}
	var u URI
	seen := map[string]bool{}
	for i, attr := range strings.Split(path, ";") {
		if attr == "" {
			continue
		}
		k, v, ok := strings.Cut(attr, "=")
		if !ok {
			// Not echoed: a mistyped attribute may hold the PIN.
			return URI{}, fmt.Errorf("pkcs11: invalid URI: path attribute %d is not name=value", i+1)
		}
		if hasPINName(k) {
			return URI{}, errors.New("pkcs11: invalid URI: the PIN goes in the query (?module-path=M&pin-value=P) or in " + EnvPIN + ", not among the path attributes")
		}
		if seen[k] {
			return URI{}, fmt.Errorf("pkcs11: invalid URI: attribute %s given twice", Redact(signer.Truncate(k)))
		}
		seen[k] = true
		val, err := url.PathUnescape(v)
		if err != nil {
			return URI{}, fmt.Errorf("pkcs11: invalid URI attribute %s: bad percent-encoding", Redact(signer.Truncate(k)))
		}
		if hasPINName(val) {
			return URI{}, fmt.Errorf("pkcs11: invalid URI: attribute %s holds a PIN attribute: separate query attributes with \"&\" (?module-path=M&pin-value=P)", Redact(signer.Truncate(k)))
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
	for i, q := range strings.Split(query, "&") {
		if q == "" {
			continue
		}
		k, v, ok := strings.Cut(q, "=")
		if !ok {
			// Not echoed: a PIN typed without its name would be.
			return URI{}, fmt.Errorf("pkcs11: invalid URI: query attribute %d is not name=value", i+1)
		}
		val, err := url.PathUnescape(v)
		if err != nil {
			return URI{}, fmt.Errorf("pkcs11: invalid URI query %s: bad percent-encoding", Redact(signer.Truncate(k)))
		}
		switch {
		case k == "module-path" && hasPINName(val):
			return URI{}, errors.New(`pkcs11: invalid URI: module-path holds a PIN attribute: separate query attributes with "&" (?module-path=M&pin-value=P)`)
		case k == "module-path":
			u.ModulePath = val
		case k == "pin-value":
			u.PIN = val
		case k == "pin-source":
			return URI{}, fmt.Errorf("pkcs11: URI query %q is not supported (module-path, pin-value): give the PIN as pin-value= or in %s", k, EnvPIN)
		case hasPINName(k): // PIN-VALUE, pin%2Dvalue, pin_value, …
			return URI{}, errors.New(`pkcs11: invalid URI: a PIN attribute spelled otherwise than "pin-value" (case, "_", percent-encoding)`)
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

// pinNames are the RFC 7512 query attributes that carry a PIN or say where
// one is.
var pinNames = []string{"pin-value", "pin-source"}

// Redact returns s, something derived from a pkcs11: URI about to be
// printed (the URI, a module path, a label), cut at the first PIN
// attribute name it holds: "pin-value" or "pin-source" in any case, with
// "_" for "-", and with any of their characters percent-encoded. What
// follows the name is replaced by "<redacted>", so a PIN in a malformed
// URI (a second "?", a PIN among the path attributes, an encoded name)
// never reaches an error or a log. The cost is linear in len(s).
func Redact(s string) string {
	if i := pinNameAt(s); i >= 0 {
		return s[:i] + "<redacted>"
	}
	return s
}

// hasPINName reports whether s holds a PIN attribute name (see Redact).
func hasPINName(s string) bool { return pinNameAt(s) >= 0 }

// pinNameAt returns the index of the first PIN attribute name in s, or -1.
func pinNameAt(s string) int {
	for i := 0; i < len(s); i++ {
		for _, name := range pinNames {
			if nameAt(s, i, name) {
				return i
			}
		}
	}
	return -1
}

// nameAt reports whether s spells name from index i, comparing letters
// case-insensitively, "_" as "-", and decoding %XX escapes.
func nameAt(s string, i int, name string) bool {
	for k := 0; k < len(name); k++ {
		if i >= len(s) {
			return false
		}
		c := s[i]
		i++
		if c == '%' && i+1 < len(s) && isHex(s[i]) && isHex(s[i+1]) {
			c = unhex(s[i])<<4 | unhex(s[i+1])
			i += 2
		}
		if c == '_' {
			c = '-'
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[k] {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
