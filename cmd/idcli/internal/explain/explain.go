// Package explain is idcli's --explain: for each signature of a request
// it prints the parameters, the signature base and the outcome of each
// check, and when the signature does not verify, the request component a
// signer and a verifier disagree on (`tool verify --explain`, `agent
// headers --explain`).
package explain

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// Explainer prints each signature of a request: its parameters, the
// signature base built from the request, and the outcome of each check.
// It never prints a private key: the base, the parameters and the public
// key's kid are all public.
type Explainer struct {
	W   io.Writer
	Now time.Time
	// Key returns the public key for a signature and where it came from.
	Key func(ctx context.Context, sig *signer.Signature) (signer.PublicKey, string, error)
}

func (e *Explainer) ok(format string, args ...any) {
	fmt.Fprintf(e.W, "  ✔ "+format+"\n", args...)
}

func (e *Explainer) fail(format string, args ...any) {
	fmt.Fprintf(e.W, "  ✘ "+format+"\n", args...)
}

// Explain reports on every signature of req and returns whether one
// verified.
func (e *Explainer) Explain(ctx context.Context, req *http.Request) bool {
	sigs, err := signer.ParseSignatures(req.Header.Values("Signature-Input"), req.Header.Values("Signature"))
	if err != nil {
		fmt.Fprintf(e.W, "explain: Signature / Signature-Input\n")
		e.fail("parse: %s", strings.TrimPrefix(err.Error(), "signer: "))
		return false
	}
	verified := false
	for i := range sigs {
		verified = e.signature(ctx, req, &sigs[i]) || verified
	}
	return verified
}

func (e *Explainer) signature(ctx context.Context, req *http.Request, sig *signer.Signature) bool {
	p := sig.Params
	fmt.Fprintf(e.W, "explain: signature %s (tag %q, alg %q, keyid %q)\n", sig.Label, p.Tag, p.Alg, p.KeyID)
	e.window(p)
	if p.Nonce == "" {
		e.fail("nonce: absent (web-bot-auth requires one)")
	} else {
		e.ok("nonce: present (%d bytes)", len(p.Nonce))
	}
	ids := make([]string, len(sig.Components))
	for i, c := range sig.Components {
		ids[i] = c.ID()
	}
	if sig.Covers(`"@authority"`) || sig.Covers(`"@target-uri"`) {
		e.ok("components: %s", strings.Join(ids, " "))
	} else {
		e.fail("components: %s (neither @authority nor @target-uri is covered)", strings.Join(ids, " "))
	}
	base, err := sig.Base(req)
	if err != nil {
		e.fail("signature base: %s", strings.TrimPrefix(err.Error(), "signer: "))
		return false
	}
	fmt.Fprintf(e.W, "  signature base (%d bytes, each line ends in LF except the last):\n", len(base))
	for _, line := range strings.Split(string(base), "\n") {
		fmt.Fprintf(e.W, "    %s\n", line)
	}
	pk, from, err := e.Key(ctx, sig)
	if err != nil {
		e.fail("key %q: %s", p.KeyID, err)
		return false
	}
	e.ok("key %q: %s key from %s", p.KeyID, pk.Algorithm(), from)
	if err := pk.Verify(p.Alg, base, sig.Value); err == nil {
		e.ok("signature: verifies over this base")
		return true
	}
	e.fail("signature: does not verify over this base with this key")
	if what := Mismatch(req, sig, pk); what != "" {
		e.fail("mismatch: %s", what)
	} else {
		e.fail("mismatch: not found by trying other methods, authorities, schemes and paths: the request differs elsewhere (a header or body), or another key signed it")
	}
	return false
}

func (e *Explainer) window(p signer.Params) {
	if !p.HasCreated {
		e.fail("created: absent")
		return
	}
	created := time.Unix(p.Created, 0).UTC()
	if !p.HasExpires {
		e.fail("expires: absent (created %s)", created.Format(time.RFC3339))
		return
	}
	expires := time.Unix(p.Expires, 0).UTC()
	span := fmt.Sprintf("created %s, expires %s, now %s", created.Format(time.RFC3339), expires.Format(time.RFC3339), e.Now.UTC().Format(time.RFC3339))
	switch {
	case created.After(e.Now.Add(middleware.DefaultSkew)):
		e.fail("window: %s (created in the future)", span)
	case e.Now.After(expires.Add(middleware.DefaultSkew)):
		e.fail("window: %s (expired)", span)
	default:
		e.ok("window: %s", span)
	}
}

// Mismatch looks for the request the signature was made over: it varies
// each covered request component a signer and a verifier commonly
// disagree on (the method, the authority's port, the scheme, a trailing
// slash) and names the variant under which the signature verifies. A
// signature by another key is never explained away: every variant must
// verify with pk.
func Mismatch(req *http.Request, sig *signer.Signature, pk signer.PublicKey) string {
	type variant struct {
		comp, value string
		apply       func(r *http.Request)
	}
	var vs []variant
	for _, c := range sig.Components {
		switch c.Name {
		case "@method":
			for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "QUERY"} {
				if m != req.Method {
					vs = append(vs, variant{"@method", m, func(r *http.Request) { r.Method = m }})
				}
			}
		case "@authority", "@target-uri":
			host := req.Host
			if host == "" {
				host = req.URL.Host
			}
			for _, h := range authorityVariants(host, req.URL.Host) {
				vs = append(vs, variant{"@authority", h, func(r *http.Request) { r.Host, r.URL.Host = h, h }})
			}
		}
		switch c.Name {
		case "@scheme", "@target-uri":
			if other := map[string]string{"http": "https", "https": "http"}[req.URL.Scheme]; other != "" {
				vs = append(vs, variant{"@scheme", other, func(r *http.Request) { r.URL.Scheme = other }})
			}
		case "@path":
			p := req.URL.Path
			alt := p + "/"
			if strings.HasSuffix(p, "/") && len(p) > 1 {
				alt = strings.TrimSuffix(p, "/")
			}
			vs = append(vs, variant{"@path", alt, func(r *http.Request) { r.URL.Path, r.URL.RawPath = alt, "" }})
		}
	}
	for _, v := range vs {
		r := req.Clone(req.Context())
		v.apply(r)
		base, err := sig.Base(r)
		if err != nil {
			continue
		}
		if pk.Verify(sig.Params.Alg, base, sig.Value) == nil {
			got, _ := componentValue(req, sig, v.comp)
			return fmt.Sprintf("the signature verifies with %q: %s, not %s: the request's %s differs from the one signed",
				v.comp, v.value, got, strings.TrimPrefix(v.comp, "@"))
		}
	}
	return ""
}

// componentValue is the value of the covered component named name in req.
func componentValue(req *http.Request, sig *signer.Signature, name string) (string, error) {
	if c, ok := sig.CoversName(name); ok {
		return c.Value(req)
	}
	c, err := signer.ParseComponent(name)
	if err != nil {
		return "", err
	}
	return c.Value(req)
}

// authorityVariants are the authorities a signer may have seen instead of
// host: host without its port (a proxy in front that listens on another
// port) and the URL's host when the Host header differs from it.
func authorityVariants(host, urlHost string) []string {
	var out []string
	if h, _, err := net.SplitHostPort(host); err == nil {
		out = append(out, h)
	}
	if urlHost != "" && !strings.EqualFold(urlHost, host) {
		out = append(out, urlHost)
	}
	return out
}

// KeySet is the key set of the Signature-Agent member for sig:
// the member named by a covered "signature-agent";key=…, else the member
// keyed by the label, else the only one (the zero KeySet without the field).
func KeySet(req *http.Request, sig *signer.Signature) (signer.KeySet, error) {
	vals := req.Header.Values("Signature-Agent")
	if len(vals) == 0 {
		return signer.KeySet{}, nil
	}
	sa, err := signer.ParseSignatureAgent(vals)
	if err != nil {
		return signer.KeySet{}, err
	}
	key := sig.Label
	if c, ok := sig.CoversName("signature-agent"); ok && c.Key != "" {
		key = c.Key
	}
	m, ok := sa.Member(key)
	if !ok {
		if len(sa.Members()) != 1 {
			return signer.KeySet{}, fmt.Errorf("Signature-Agent has no member %q", key)
		}
		m = sa.Members()[0]
	}
	return m.KeySet()
}
