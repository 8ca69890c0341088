// Package cfrules applies the checks of Cloudflare's key-directory
// validator (http-signature-directory, in cloudflare/web-bot-auth) to a
// directory response, per key, for idcli directory check.
package cfrules

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

// Key is what Cloudflare's key-directory validator
// (http-signature-directory, in cloudflare/web-bot-auth) checks of one key
// of a directory response, and whether its signature binds the body.
type Key struct {
	Thumbprint string `json:"thumbprint"`
	// Ed25519: the validator accepts OKP Ed25519 keys only.
	Ed25519 bool `json:"ed25519"`
	// Signed: a signature with created and expires, tag
	// http-message-signatures-directory, keyid = the thumbprint, covering
	// @authority (with ;req, else it has no value).
	Signed bool `json:"signed"`
	// Expires is that signature's expiry; Unexpired, that it is after now.
	Expires   *time.Time `json:"expires,omitempty"`
	Unexpired bool       `json:"unexpired"`
	// Verified: the signature verifies over "@authority";req = the URL's
	// authority and the response's fields.
	Verified bool `json:"verified"`
	// BindsBody (our rule, not the validator's): the signature covers
	// content-digest and Content-Digest matches the body.
	BindsBody bool `json:"binds_body"`
	// Problem is the first rule broken, or "".
	Problem string `json:"problem,omitempty"`
}

// OK reports whether the key passes the validator's rules.
func (k Key) OK() bool { return k.Problem == "" }

// Report is the validator's verdict on a directory response.
type Report struct {
	// HTTPS: the validator refuses any other scheme.
	HTTPS bool  `json:"https"`
	Keys  []Key `json:"keys"`
}

// OK reports whether the validator would accept the directory.
func (c *Report) OK() bool {
	if !c.HTTPS || len(c.Keys) == 0 {
		return false
	}
	for _, k := range c.Keys {
		if !k.OK() {
			return false
		}
	}
	return true
}

// Check applies, per key of r, the checks of Cloudflare's
// key-directory validator to the response r received from r.URL, at now.
// It returns nil for a report that is not a directory or holds no response.
func Check(r *keyfetch.Report, now time.Time) *Report {
	if r.Kind != signer.KindDirectory || r.Header == nil {
		return nil
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil
	}
	out := &Report{HTTPS: u.Scheme == "https", Keys: []Key{}}
	h := r.Header
	var sigs []signer.Signature
	if in := h.Values("Signature-Input"); len(in) > 0 {
		// A response whose signature fields do not parse has no signature
		// the validator could use.
		sigs, _ = signer.ParseSignaturesLimited(in, h.Values("Signature"), signer.Limits{
			MaxSignatures: 64, MaxComponents: 16, MaxFieldBytes: 64 << 10, Tag: signer.DirectoryTag})
	}
	resp := &http.Response{StatusCode: r.StatusCode, Header: h,
		Request: &http.Request{Method: http.MethodGet, Host: u.Host, URL: u, Header: http.Header{}}}
	for _, k := range r.Keys {
		ck := Key{Thumbprint: k.Thumbprint, Ed25519: k.Algorithm() == signer.AlgEd25519}
		if !ck.Ed25519 {
			ck.Problem = "not an Ed25519 key (the validator accepts OKP Ed25519 only)"
			out.Keys = append(out.Keys, ck)
			continue
		}
		var s *signer.Signature
		for i := range sigs {
			p := sigs[i].Params
			if p.HasCreated && p.HasExpires && p.Tag == signer.DirectoryTag && p.KeyID == k.Thumbprint {
				if _, ok := sigs[i].CoversName("@authority"); ok {
					s = &sigs[i]
					break
				}
			}
		}
		switch {
		case s == nil:
			ck.Problem = fmt.Sprintf("no signature with tag %s, keyid = thumbprint, created, expires and \"@authority\";req", signer.DirectoryTag)
		default:
			ck.Signed = true
			exp := time.Unix(s.Params.Expires, 0).UTC()
			ck.Expires, ck.Unexpired = &exp, now.Before(exp)
			base, err := s.AppendResponseBase(nil, resp)
			if err == nil && !s.Covers(`"@authority";req`) {
				err = fmt.Errorf(`it covers "@authority" without ;req`)
			}
			if err == nil {
				err = k.Verify(s.Params.Alg, base, s.Value)
			}
			ck.Verified = err == nil
			ck.BindsBody = s.Covers(`"content-digest"`) && signer.VerifyContentDigest(h.Values("Content-Digest"), r.Body) == nil
			switch {
			case !ck.Verified:
				ck.Problem = "the signature does not verify: " + strings.TrimPrefix(err.Error(), "signer: ")
			case !ck.Unexpired:
				ck.Problem = "the signature expired at " + exp.Format(time.RFC3339)
			}
		}
		out.Keys = append(out.Keys, ck)
	}
	return out
}

// Print writes the validator's verdict to w, one line per key.
// Its rules are stricter than a verifier's (an unsigned directory is
// usable), so a rule not met is a note ("•"), not a problem.
func Print(w io.Writer, c *Report) {
	if c == nil || len(c.Keys) == 0 {
		return
	}
	signed := false
	for _, k := range c.Keys {
		signed = signed || k.Signed
	}
	if !signed {
		fmt.Fprintf(w, "• Cloudflare's directory rules not met: unsigned (its validator wants, per key, a signature tagged %s with keyid = thumbprint, created, expires, covering \"@authority\";req)\n", signer.DirectoryTag)
	} else {
		for _, k := range c.Keys {
			bind := "binds the body (content-digest)"
			if !k.BindsBody {
				bind = "does not bind the body (no content-digest)"
			}
			if k.OK() {
				fmt.Fprintf(w, "✔ Cloudflare's directory rules: key %s signed (tag, keyid = thumbprint, created/expires, \"@authority\";req), valid until %s; %s\n",
					k.Thumbprint, k.Expires.Format(time.RFC3339), bind)
			} else {
				fmt.Fprintf(w, "• Cloudflare's directory rules not met by key %s: %s\n", k.Thumbprint, k.Problem)
			}
		}
	}
	if !c.HTTPS {
		fmt.Fprintf(w, "• Cloudflare's directory validator also requires an https:// URL\n")
	}
}
