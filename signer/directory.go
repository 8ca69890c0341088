package signer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// DirectoryComponents are the components a key directory's own signature
// covers (web-bot-auth directory draft, protocol-01 E.2.3): the authority
// of the request the directory answers and the Content-Digest of the body,
// so that the signature vouches for the key list itself.
var DirectoryComponents = []string{`"@authority";req`, `"content-digest"`}

// DirectoryDigestAlg is the Content-Digest algorithm of a signed directory.
const DirectoryDigestAlg = "sha-256"

// DirectoryBody returns the key directory document {"keys":[…]} of keys,
// public members only, ending in a newline: the exact body an agentid
// service serves, and so the body its agents sign.
func DirectoryBody(keys []JWK) []byte {
	pub := make([]JWK, len(keys))
	for i, k := range keys {
		pub[i] = k.Public()
	}
	b, _ := json.Marshal(struct {
		Keys []JWK `json:"keys"`
	}{pub})
	return append(b, '\n')
}

// DirectorySignature is one signature of a key directory response, without
// its label (labels belong to the response that carries it, and the
// signature base does not hold them).
type DirectorySignature struct {
	// Input is the Signature-Input inner list, such as
	// ("@authority";req "content-digest");created=…;keyid="…";alg="ed25519";expires=…;tag="http-message-signatures-directory".
	Input string
	// Value is the signature (64 bytes for Ed25519).
	Value []byte
}

// directoryResponse returns the response a key directory at
// scheme://authority answers with a body whose Content-Digest field value
// is cd: status 200, that Content-Digest, and the request it answers (a GET
// of that authority). Directory signatures are made and checked over it.
// authority must be a host[:port] (ErrInvalidAuthority otherwise).
func directoryResponse(scheme, authority, cd string) (*http.Response, error) {
	if _, err := ParseAuthority(scheme, authority); err != nil {
		return nil, err
	}
	req := &http.Request{Method: http.MethodGet, Host: authority,
		URL: &url.URL{Scheme: scheme, Host: authority, Path: DirectoryPath}, Header: http.Header{}}
	return &http.Response{StatusCode: http.StatusOK, Request: req,
		Header: http.Header{"Content-Digest": {cd}}}, nil
}

// SignDirectory signs the response of the key directory at
// scheme://authority that carries body with key: it
// covers DirectoryComponents, with created, keyid (the key's thumbprint),
// alg, expires and tag DirectoryTag, and no nonce (the same response is
// served to every client).
func SignDirectory(key PrivateKey, scheme, authority string, body []byte, created, expires time.Time) (DirectorySignature, error) {
	if !key.CanSign() {
		return DirectorySignature{}, errors.New("signer: no private key")
	}
	if !expires.After(created) {
		return DirectorySignature{}, fmt.Errorf("signer: directory signature: expires %s is not after created %s", expires.UTC().Format(time.RFC3339), created.UTC().Format(time.RFC3339))
	}
	comps := make([]Component, len(DirectoryComponents))
	for i, n := range DirectoryComponents {
		c, err := ParseComponent(n)
		if err != nil {
			return DirectorySignature{}, err
		}
		comps[i] = c
	}
	alg := key.Public.Algorithm()
	if alg == "" {
		alg = AlgEd25519
	}
	sig := newSignature("dir", comps, Params{Created: created.Unix(), HasCreated: true,
		Expires: expires.Unix(), HasExpires: true, KeyID: key.Public.Thumbprint, Alg: alg, Tag: DirectoryTag})
	return signDirectory(key, &sig, scheme, authority, body)
}

// signDirectory signs sig's base over the directory response.
func signDirectory(key PrivateKey, sig *Signature, scheme, authority string, body []byte) (DirectorySignature, error) {
	cd, _ := ContentDigest(body, DirectoryDigestAlg)
	resp, err := directoryResponse(scheme, authority, cd)
	if err != nil {
		return DirectorySignature{}, err
	}
	base, err := sig.AppendResponseBase(nil, resp)
	if err != nil {
		return DirectorySignature{}, err
	}
	value, err := key.signMessage(base)
	if err != nil {
		return DirectorySignature{}, err
	}
	in, err := sig.SignatureParams()
	if err != nil {
		return DirectorySignature{}, err
	}
	return DirectorySignature{Input: in, Value: value}, nil
}

// ParseDirectorySignature parses d.Input as one Signature-Input inner list
// (at most 512 bytes and 8 components) and pairs it with d.Value.
func ParseDirectorySignature(d DirectorySignature) (Signature, error) {
	const maxInput = 512
	if len(d.Input) > maxInput {
		return Signature{}, fmt.Errorf("%w: %w: the input is %d bytes, more than %d", errInvalidSignatureInput, ErrFieldTooLarge, len(d.Input), maxInput)
	}
	ms, err := parseDict("dir="+d.Input, 1)
	if err != nil || len(ms) != 1 || !ms[0].inner {
		return Signature{}, fmt.Errorf("%w: the input is not one inner list", errInvalidSignatureInput)
	}
	s, err := signatureFromMember(&ms[0], 8, false)
	if err != nil {
		return Signature{}, err
	}
	s.Value = d.Value
	return s, nil
}

// VerifyDirectoryDigest checks sig, a directory signature, against pk over
// the response of the directory at scheme://authority whose body has the
// Content-Digest field value contentDigest = ContentDigest(body,
// DirectoryDigestAlg): the base is built exactly as SignDirectory builds
// it. A server checking several signatures over the directory it serves
// hashes the body once. The signature covers that field, so a
// contentDigest that is not the body's makes a signature over the body
// fail to verify. It checks the signature only; the caller checks its
// parameters.
func VerifyDirectoryDigest(sig *Signature, pk PublicKey, scheme, authority, contentDigest string) error {
	resp, err := directoryResponse(scheme, authority, contentDigest)
	if err != nil {
		return err
	}
	base, err := sig.AppendResponseBase(nil, resp)
	if err != nil {
		return err
	}
	return pk.Verify(sig.Params.Alg, base, sig.Value)
}
