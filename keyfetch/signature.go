package keyfetch

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentid/agentid/signer"
)

// DirectorySignatureTag is the tag of the signature a key directory puts on
// its own responses (web-bot-auth protocol-01), covering the authority of
// the request it answers.
const DirectorySignatureTag = signer.DirectoryTag

// Errors wrapped by a *FetchError when a response's directory signature is
// refused.
var (
	// ErrDirectorySignature means a response carries a signature tagged
	// DirectorySignatureTag that does not verify: it does not cover
	// `"@authority";req`, names no key of the set, is outside its validity
	// window, or is wrong. The response is not used.
	ErrDirectorySignature = errors.New("keyfetch: directory signature refused")
	// ErrUnsignedDirectory means Config.RequireSignedDirectories is set and
	// the response holding the keys carries no verified directory
	// signature covering its body (content-digest).
	ErrUnsignedDirectory = errors.New("keyfetch: directory response is not signed")
)

// authorityReq is the component every directory signature must cover: the
// authority of the fetch request.
const authorityReq = `"@authority";req`

// contentDigest is the component that binds a directory signature to the
// body, through the Content-Digest field (RFC 9530).
const contentDigest = `"content-digest"`

// signatureCheck is the outcome of checking one response's directory
// signatures.
type signatureCheck struct {
	present bool      // the response carries at least one
	body    bool      // one that verified covers content-digest, which matches the body
	by      []string  // thumbprints of the keys whose signatures verified
	expires time.Time // the earliest expires of those that verified
}

// checkDirectorySignatures verifies every signature of r tagged
// DirectorySignatureTag against keys (the set r delivered): each must cover
// `"@authority";req`, name by its keyid the thumbprint of a key of the set,
// hold created and expires around now (Skew allowed: a created in the
// future beyond it is refused), and verify over the response signature
// base, whose request is the one this fetch sent. A signature covering
// content-digest also needs a Content-Digest (sha-256 or sha-512) that
// matches the body: only such a signature vouches for the keys themselves
// (sc.body); one over the authority alone vouches for the host.
// Signatures with other tags are ignored; so are signature fields that do
// not mention the tag at all, even malformed ones. Any failure refuses the
// response (an error wrapping ErrDirectorySignature).
func (f *Fetcher) checkDirectorySignatures(r *response, keys []signer.PublicKey) (signatureCheck, error) {
	var sc signatureCheck
	h := r.resp.Header
	inputs, values := h.Values("Signature-Input"), h.Values("Signature")
	if len(inputs) == 0 || !mentionsTag(inputs) {
		return sc, nil
	}
	refuse := func(format string, args ...any) (signatureCheck, error) {
		return sc, fmt.Errorf("%w: "+format, append([]any{ErrDirectorySignature}, args...)...)
	}
	sigs, err := signer.ParseSignaturesLimited(inputs, values, signer.Limits{
		MaxSignatures: f.cfg.MaxKeys,
		MaxComponents: 16,
		MaxFieldBytes: 64 << 10,
		Tag:           DirectorySignatureTag,
	})
	if err != nil {
		sc.present = true
		return refuse("%v", strings.TrimPrefix(err.Error(), "signer: "))
	}
	now := f.cfg.Now()
	skew := max(f.cfg.Skew, 0)
	var base []byte
	for i := range sigs {
		s := &sigs[i]
		p := &s.Params
		if p.Tag != DirectorySignatureTag {
			continue
		}
		sc.present = true
		if !s.Covers(authorityReq) {
			return refuse("%s does not cover %s", s.Label, authorityReq)
		}
		pk, ok := findThumbprint(keys, p.KeyID)
		if !ok {
			return refuse("%s: keyid %q is not the thumbprint of a key of the set", s.Label, signer.Truncate(p.KeyID))
		}
		if !p.HasCreated || !p.HasExpires {
			return refuse("%s: created and expires are required", s.Label)
		}
		created, expires := time.Unix(p.Created, 0), time.Unix(p.Expires, 0)
		switch {
		case expires.Before(created):
			return refuse("%s: expires is before created", s.Label)
		case created.After(now.Add(skew)):
			return refuse("%s: created at %s, in the future", s.Label, created.UTC().Format(time.RFC3339))
		case now.After(expires.Add(skew)):
			return refuse("%s: expired at %s", s.Label, expires.UTC().Format(time.RFC3339))
		}
		if base, err = s.AppendResponseBase(base[:0], r.resp); err != nil {
			return refuse("%s: %v", s.Label, strings.TrimPrefix(err.Error(), "signer: "))
		}
		if err := pk.Verify(p.Alg, base, s.Value); err != nil {
			return refuse("%s by %s: %v", s.Label, pk.Thumbprint, strings.TrimPrefix(err.Error(), "signer: "))
		}
		if s.Covers(contentDigest) {
			if err := signer.VerifyContentDigest(h.Values("Content-Digest"), r.body); err != nil {
				return refuse("%s: Content-Digest does not match the body: %v", s.Label, strings.TrimPrefix(err.Error(), "signer: "))
			}
			sc.body = true
		}
		sc.by = append(sc.by, pk.Thumbprint)
		if sc.expires.IsZero() || expires.Before(sc.expires) {
			sc.expires = expires
		}
	}
	return sc, nil
}

// mentionsTag reports whether the Signature-Input lines could hold a
// directory signature: a member carrying the tag must contain it verbatim.
func mentionsTag(inputs []string) bool {
	for _, v := range inputs {
		if strings.Contains(v, `"`+DirectorySignatureTag+`"`) {
			return true
		}
	}
	return false
}

func findThumbprint(keys []signer.PublicKey, tp string) (signer.PublicKey, bool) {
	for _, k := range keys {
		if k.Thumbprint == tp {
			return k, true
		}
	}
	return signer.PublicKey{}, false
}

// signatures checks the directory signatures of the responses that
// delivered o's keys: the one holding the keys (keysResp) and, for a card
// naming a jwks_uri, the card's own response when it is signed. With
// RequireSignedDirectories, keysResp must carry a verified one that covers
// its body, unless it delivers no key: an empty set grants nothing, so it
// is taken unsigned (the agent's keys are dropped at once, as a revocation
// or an operator's disable asks). The keys it vouches for are then good
// until its signatures expire (o.signedUntil).
func (f *Fetcher) signatures(o *outcome, keysResp *response) error {
	sc, err := f.checkDirectorySignatures(keysResp, o.keys)
	o.signed, o.signedBy = sc.present, sc.by
	if err != nil {
		return &FetchError{URL: keysResp.url, StatusCode: keysResp.status, Err: err}
	}
	o.verified, o.authenticated = sc.present, sc.body
	if card := o.doc; card != keysResp && card.status == http.StatusOK {
		if _, err := f.checkDirectorySignatures(card, o.keys); err != nil {
			o.verified = false
			return &FetchError{URL: card.url, StatusCode: card.status, Err: err}
		}
	}
	switch {
	case !f.cfg.RequireSignedDirectories:
	case sc.body:
		// A response replayed after its earliest signature expired
		// would be refused (checkDirectorySignatures): the cached keys
		// are vouched for no longer than that.
		o.signedUntil = sc.expires.Add(max(f.cfg.Skew, 0))
	case len(o.keys) == 0:
		// Whoever serves the directory can always take its keys away
		// (a 404 or an outage does it once MaxStale has passed); an
		// answer without a key only does it sooner, and never lets a
		// signature verify that would not otherwise.
	case sc.present:
		return &FetchError{URL: keysResp.url, StatusCode: keysResp.status, Err: fmt.Errorf("%w: its directory signature covers %s but not %s, so it does not vouch for the keys, and RequireSignedDirectories is set", ErrUnsignedDirectory, authorityReq, contentDigest)}
	default:
		return &FetchError{URL: keysResp.url, StatusCode: keysResp.status, Err: fmt.Errorf("%w (tag %q), and RequireSignedDirectories is set", ErrUnsignedDirectory, DirectorySignatureTag)}
	}
	return nil
}
