//go:build cgo

package pkcs11

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"

	p11 "github.com/miekg/pkcs11"
)

// Supported is true: this binary was built with cgo and can load a PKCS#11
// module.
const Supported = true

// Ed25519 in PKCS#11 3.0: the key type and mechanisms (not named by the
// binding, which predates them).
const (
	ckkECEdwards           = 0x00000040
	ckmECEdwardsKeyPairGen = 0x00001055
	ckmEdDSA               = 0x00001057
)

// ed25519OID is the DER of OID 1.3.101.112 (id-Ed25519, RFC 8410), the
// CKA_EC_PARAMS of an Ed25519 key.
var ed25519OID = []byte{0x06, 0x03, 0x2b, 0x65, 0x70}

// modules are the loaded and initialized PKCS#11 modules by path. A module
// is initialized once per process and stays loaded: C_Initialize may not
// be called twice, and another Key may still use it.
var (
	modulesMu sync.Mutex
	modules   = map[string]*p11.Ctx{}
)

func module(path string) (*p11.Ctx, error) {
	modulesMu.Lock()
	defer modulesMu.Unlock()
	if c, ok := modules[path]; ok {
		return c, nil
	}
	c := p11.New(path)
	if c == nil {
		return nil, fmt.Errorf("pkcs11: cannot load module %s", Redact(path))
	}
	if err := c.Initialize(); err != nil && !isCode(err, p11.CKR_CRYPTOKI_ALREADY_INITIALIZED) {
		c.Destroy()
		return nil, fmt.Errorf("pkcs11: initialize %s: %w", Redact(path), err)
	}
	modules[path] = c
	return c, nil
}

func isCode(err error, code uint) bool {
	var e p11.Error
	return errors.As(err, &e) && uint(e) == code
}

// Key is an Ed25519 key in a PKCS#11 token: a crypto.Signer whose private
// key stays on the token. It is safe for concurrent use (its session is
// used by one call at a time).
type Key struct {
	mu       sync.Mutex
	ctx      *p11.Ctx
	session  p11.SessionHandle
	priv     p11.ObjectHandle
	pubObj   p11.ObjectHandle
	pub      ed25519.PublicKey
	id       []byte
	closed   bool
	uriLabel string
}

// Open logs in to the token u names and finds its Ed25519 private key
// labelled u.Object (and with CKA_ID u.ID when given) and the matching
// public key. Exactly one private key must match.
func Open(u URI) (*Key, error) {
	k, err := session(u)
	if err != nil {
		return nil, err
	}
	tmpl := []*p11.Attribute{
		p11.NewAttribute(p11.CKA_CLASS, p11.CKO_PRIVATE_KEY),
		p11.NewAttribute(p11.CKA_LABEL, u.Object),
	}
	if u.ID != nil {
		tmpl = append(tmpl, p11.NewAttribute(p11.CKA_ID, u.ID))
	}
	objs, err := k.find(tmpl, 2)
	if err == nil && len(objs) != 1 {
		if len(objs) == 0 {
			err = fmt.Errorf("%w: no private key labelled %q in token %q (create one with idcli agent init --pkcs11-uri)", ErrNoKey, Redact(u.Object), Redact(u.Token))
		} else {
			err = fmt.Errorf("pkcs11: several private keys labelled %q in token %q: add id=… to the URI", Redact(u.Object), Redact(u.Token))
		}
	}
	if err != nil {
		k.Close()
		return nil, err
	}
	k.priv = objs[0]
	attrs, err := k.ctx.GetAttributeValue(k.session, k.priv, []*p11.Attribute{
		p11.NewAttribute(p11.CKA_KEY_TYPE, nil),
		p11.NewAttribute(p11.CKA_ID, nil),
	})
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("pkcs11: read key attributes: %w", err)
	}
	if kt := attrs[0].Value; !bytes.Equal(kt, ulong(ckkECEdwards)) {
		k.Close()
		return nil, fmt.Errorf("pkcs11: key %q is not an Ed25519 (CKK_EC_EDWARDS) key", Redact(u.Object))
	}
	k.id = attrs[1].Value
	pubs, err := k.find([]*p11.Attribute{
		p11.NewAttribute(p11.CKA_CLASS, p11.CKO_PUBLIC_KEY),
		p11.NewAttribute(p11.CKA_LABEL, u.Object),
		p11.NewAttribute(p11.CKA_ID, k.id),
	}, 1)
	if err == nil && len(pubs) == 0 {
		err = fmt.Errorf("pkcs11: no public key labelled %q with the private key's id in token %q", Redact(u.Object), Redact(u.Token))
	}
	if err != nil {
		k.Close()
		return nil, err
	}
	k.pubObj = pubs[0]
	if err := k.readPublic(); err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

// Generate creates a new Ed25519 key pair on the token u names, labelled
// u.Object, with a random 16-byte CKA_ID (u.ID is ignored): token objects,
// the private key CKA_SENSITIVE and not CKA_EXTRACTABLE, so it can sign but
// never be read.
func Generate(u URI) (*Key, error) {
	k, err := session(u)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 16)
	if _, err := io.ReadFull(rand.Reader, id); err != nil {
		k.Close()
		return nil, fmt.Errorf("pkcs11: key id: %w", err)
	}
	pubT := []*p11.Attribute{
		p11.NewAttribute(p11.CKA_CLASS, p11.CKO_PUBLIC_KEY),
		p11.NewAttribute(p11.CKA_KEY_TYPE, ckkECEdwards),
		p11.NewAttribute(p11.CKA_TOKEN, true),
		p11.NewAttribute(p11.CKA_VERIFY, true),
		p11.NewAttribute(p11.CKA_EC_PARAMS, ed25519OID),
		p11.NewAttribute(p11.CKA_LABEL, u.Object),
		p11.NewAttribute(p11.CKA_ID, id),
	}
	privT := []*p11.Attribute{
		p11.NewAttribute(p11.CKA_CLASS, p11.CKO_PRIVATE_KEY),
		p11.NewAttribute(p11.CKA_KEY_TYPE, ckkECEdwards),
		p11.NewAttribute(p11.CKA_TOKEN, true),
		p11.NewAttribute(p11.CKA_PRIVATE, true),
		p11.NewAttribute(p11.CKA_SIGN, true),
		p11.NewAttribute(p11.CKA_SENSITIVE, true),
		p11.NewAttribute(p11.CKA_EXTRACTABLE, false),
		p11.NewAttribute(p11.CKA_LABEL, u.Object),
		p11.NewAttribute(p11.CKA_ID, id),
	}
	pub, priv, err := k.ctx.GenerateKeyPair(k.session, []*p11.Mechanism{p11.NewMechanism(ckmECEdwardsKeyPairGen, nil)}, pubT, privT)
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("pkcs11: generate an Ed25519 key on token %q: %w", Redact(u.Token), err)
	}
	k.priv, k.pubObj, k.id = priv, pub, id
	if err := k.readPublic(); err != nil {
		k.Destroy()
		k.Close()
		return nil, err
	}
	return k, nil
}

// session loads the module, finds the token by label, opens a read-write
// session and logs in with the URI's PIN.
func session(u URI) (*Key, error) {
	ctx, err := module(u.ModulePath)
	if err != nil {
		return nil, err
	}
	slots, err := ctx.GetSlotList(true)
	if err != nil {
		return nil, fmt.Errorf("pkcs11: list slots: %w", err)
	}
	slot, found := uint(0), false
	for _, s := range slots {
		ti, err := ctx.GetTokenInfo(s)
		if err == nil && ti.Label == u.Token {
			slot, found = s, true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("pkcs11: no token labelled %q in %s", Redact(u.Token), Redact(u.ModulePath))
	}
	sh, err := ctx.OpenSession(slot, p11.CKF_SERIAL_SESSION|p11.CKF_RW_SESSION)
	if err != nil {
		return nil, fmt.Errorf("pkcs11: open a session on token %q: %w", Redact(u.Token), err)
	}
	k := &Key{ctx: ctx, session: sh, uriLabel: u.Object}
	if u.PIN == "" {
		k.Close()
		return nil, fmt.Errorf("pkcs11: no PIN for token %q: add pin-value= to the URI or set %s", Redact(u.Token), EnvPIN)
	}
	if err := ctx.Login(sh, p11.CKU_USER, u.PIN); err != nil && !isCode(err, p11.CKR_USER_ALREADY_LOGGED_IN) {
		k.Close()
		if isCode(err, p11.CKR_PIN_INCORRECT) {
			return nil, fmt.Errorf("pkcs11: log in to token %q: wrong PIN", Redact(u.Token))
		}
		return nil, fmt.Errorf("pkcs11: log in to token %q: %w", Redact(u.Token), err)
	}
	return k, nil
}

func (k *Key) find(tmpl []*p11.Attribute, max int) ([]p11.ObjectHandle, error) {
	if err := k.ctx.FindObjectsInit(k.session, tmpl); err != nil {
		return nil, fmt.Errorf("pkcs11: find objects: %w", err)
	}
	objs, _, err := k.ctx.FindObjects(k.session, max)
	if ferr := k.ctx.FindObjectsFinal(k.session); err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		return nil, fmt.Errorf("pkcs11: find objects: %w", err)
	}
	return objs, nil
}

// readPublic reads CKA_EC_POINT of the public key: the 32-byte key, as a
// DER OCTET STRING (what PKCS#11 3.0 specifies) or bare.
func (k *Key) readPublic() error {
	attrs, err := k.ctx.GetAttributeValue(k.session, k.pubObj, []*p11.Attribute{p11.NewAttribute(p11.CKA_EC_POINT, nil)})
	if err != nil {
		return fmt.Errorf("pkcs11: read the public key: %w", err)
	}
	pt := attrs[0].Value
	if len(pt) == 2+ed25519.PublicKeySize && pt[0] == 0x04 && pt[1] == ed25519.PublicKeySize {
		pt = pt[2:]
	}
	if len(pt) != ed25519.PublicKeySize {
		return fmt.Errorf("pkcs11: the public key's CKA_EC_POINT is %d bytes, not an Ed25519 key", len(attrs[0].Value))
	}
	k.pub = ed25519.PublicKey(bytes.Clone(pt))
	return nil
}

// ulong encodes v as a CK_ULONG attribute value in the platform's layout.
func ulong(v uint) []byte { return p11.NewAttribute(0, v).Value }

// Public returns the ed25519.PublicKey.
func (k *Key) Public() crypto.PublicKey { return k.pub }

// ID returns the key's CKA_ID.
func (k *Key) ID() []byte { return bytes.Clone(k.id) }

// Sign signs msg with CKM_EDDSA (pure Ed25519). opts must be crypto.Hash(0)
// (the message itself, not a digest); rand is not used.
func (k *Key) Sign(_ io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts != nil && opts.HashFunc() != 0 {
		return nil, errors.New("pkcs11: Ed25519 signs the message itself: want crypto.Hash(0)")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, errors.New("pkcs11: key is closed")
	}
	if err := k.ctx.SignInit(k.session, []*p11.Mechanism{p11.NewMechanism(ckmEdDSA, nil)}, k.priv); err != nil {
		return nil, fmt.Errorf("pkcs11: sign: %w", err)
	}
	sig, err := k.ctx.Sign(k.session, msg)
	if err != nil {
		return nil, fmt.Errorf("pkcs11: sign: %w", err)
	}
	return sig, nil
}

// CheckProtected returns nil when the token reports the private key as
// CKA_SENSITIVE and not CKA_EXTRACTABLE (it can never leave the token in
// the clear), else an error naming the attribute.
func (k *Key) CheckProtected() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	attrs, err := k.ctx.GetAttributeValue(k.session, k.priv, []*p11.Attribute{
		p11.NewAttribute(p11.CKA_SENSITIVE, nil),
		p11.NewAttribute(p11.CKA_EXTRACTABLE, nil),
	})
	if err != nil {
		return fmt.Errorf("pkcs11: read key attributes: %w", err)
	}
	if !isTrue(attrs[0].Value) {
		return fmt.Errorf("pkcs11: key %q is not CKA_SENSITIVE", Redact(k.uriLabel))
	}
	if isTrue(attrs[1].Value) {
		return fmt.Errorf("pkcs11: key %q is CKA_EXTRACTABLE", Redact(k.uriLabel))
	}
	return nil
}

func isTrue(v []byte) bool { return len(v) > 0 && v[0] != 0 }

// Destroy deletes the key pair from the token (after a rotation, the old
// key; after a failed registration, the new one).
func (k *Key) Destroy() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.ctx.DestroyObject(k.session, k.priv)
	if perr := k.ctx.DestroyObject(k.session, k.pubObj); err == nil {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("pkcs11: destroy key %q: %w", Redact(k.uriLabel), err)
	}
	return nil
}

// Close closes the key's session. The module stays loaded for other keys.
func (k *Key) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil
	}
	k.closed = true
	return k.ctx.CloseSession(k.session)
}
