package signer

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Defaults of the web-bot-auth signing profile.
const (
	DefaultLabel = "sig1"
	DefaultTag   = "web-bot-auth"
	DefaultTTL   = 300 * time.Second
)

// WriteComponents are covered by requests to the service's write routes
// (POST /agents, PUT /agents/{uid}/keys).
var WriteComponents = []string{"@method", "@authority", "@path", "content-digest"}

// Options controls Sign. The zero value is the default profile
// (web-bot-auth protocol-01):
// sig1=("@authority" "signature-agent";key="sig1");created;keyid;alg="ed25519";expires=created+300;nonce;tag="web-bot-auth"
// with Signature-Agent: sig1="<key-set URL>", or sig1=("@authority") when
// no SignatureAgent is given. Legacy selects the older shape.
type Options struct {
	// Label names the signature. If "", "sig1".
	Label string
	// Components are the covered components, each a bare name ("@method",
	// "content-digest") or a serialized sf-item (`"signature-agent";key="sig1"`).
	// If nil, just "@authority".
	Components []string
	// Tag is the tag parameter. If "", "web-bot-auth".
	Tag string
	// Nonce is the nonce parameter. If "", 64 random bytes, base64url.
	Nonce string
	// NoNonce omits the nonce parameter.
	NoNonce bool
	// Created is the creation time. If zero, Now().
	Created time.Time
	// Expires is the expiry. If zero, Created+TTL.
	Expires time.Time
	// TTL is the validity when Expires is zero. If 0, 300 s.
	TTL time.Duration
	// SignatureAgent is the agent's key-set URL or origin; Signature-Agent
	// is sent as `<label>="<identity>"`, the origin for an origin's
	// well-known directory, else the URL. If "", the header is left alone.
	SignatureAgent string
	// Legacy selects the shape signed before protocol-01: the
	// Signature-Agent member is sent but not covered (only Components,
	// "@authority" by default). vestauth 0.21.1 and npm web-bot-auth 0.1.3
	// verify only this shape; a strict protocol-01 verifier refuses it.
	Legacy bool
	// Standards covers `"signature-agent";key="<label>"` even with Legacy.
	// Without Legacy the member is always covered when SignatureAgent is
	// set, unless Components already cover a form of signature-agent.
	Standards bool
	// Metadata, if not empty, is sent as the Signed-Agent-Metadata
	// dictionary (draft-vilgalys-webbotauth-signed-agent-metadata-00),
	// each value an sf-string, members in key order, and the field is
	// covered. Keys must be structured-field keys; values printable ASCII.
	Metadata map[string]string
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
	// Rand is the nonce source. If nil, crypto/rand.Reader.
	Rand io.Reader
}

func (o Options) withDefaults() Options {
	o.Label = cmp.Or(o.Label, DefaultLabel)
	o.Tag = cmp.Or(o.Tag, DefaultTag)
	o.TTL = cmp.Or(o.TTL, DefaultTTL)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.Components == nil {
		o.Components = []string{"@authority"}
	}
	return o
}

// newNonce returns 64 random bytes from r (crypto/rand if nil), base64url.
func newNonce(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	var b [64]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("signer: nonce: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Sign signs req in place: it adds (or replaces) the member opts.Label of the
// Signature and Signature-Input fields, keeping other signatures, and sets
// Signature-Agent when opts.SignatureAgent is given. When content-digest is
// covered and req has no Content-Digest, it computes sha-256 over the body
// (read and restored).
func Sign(req *http.Request, key PrivateKey, opts Options) error {
	if !key.CanSign() {
		return errors.New("signer: no private key")
	}
	o := opts.withDefaults()
	if !validKey(o.Label) {
		return fmt.Errorf("signer: label %q is not a structured-field key (lowercase letter or '*', then a-z 0-9 _ - . *)", o.Label)
	}
	if o.SignatureAgent != "" {
		ks, err := ParseKeySetURL(o.SignatureAgent)
		if err != nil {
			return err
		}
		v, _ := appendBare(nil, bareItem{kind: kindString, s: ks.Identity()})
		setDictMember(req.Header, "Signature-Agent", o.Label, string(v))
	}
	names := o.Components
	if o.SignatureAgent != "" && (o.Standards || !o.Legacy) && !coversAgent(names) {
		names = append(append([]string(nil), names...), `"signature-agent";key="`+o.Label+`"`)
	}
	if len(o.Metadata) > 0 {
		v, err := serializeMetadata(o.Metadata)
		if err != nil {
			return err
		}
		req.Header.Set(MetadataHeader, v)
		if !containsString(names, MetadataComponent) {
			names = append(append([]string(nil), names...), MetadataComponent)
		}
	}
	comps := make([]Component, 0, len(names))
	for _, n := range names {
		c, err := ParseComponent(n)
		if err != nil {
			return err
		}
		if c.Name == "content-digest" && req.Header.Get("Content-Digest") == "" {
			body, err := ReadBody(req, 0)
			if err != nil {
				return err
			}
			cd, _ := ContentDigest(body, "sha-256")
			req.Header.Set("Content-Digest", cd)
		}
		comps = append(comps, c)
	}
	if err := checkDuplicates(comps); err != nil {
		return err
	}
	created := o.Created
	if created.IsZero() {
		created = o.Now()
	}
	expires := o.Expires
	if expires.IsZero() {
		expires = created.Add(o.TTL)
	}
	nonce := o.Nonce
	if nonce == "" && !o.NoNonce {
		var err error
		if nonce, err = newNonce(o.Rand); err != nil {
			return err
		}
	}
	p := Params{Created: created.Unix(), HasCreated: true, Expires: expires.Unix(), HasExpires: true,
		KeyID: key.KeyID(), Alg: "ed25519", Nonce: nonce, Tag: o.Tag}
	if o.NoNonce {
		p.Nonce = ""
	}
	sig := newSignature(o.Label, comps, p)
	base, err := sig.Base(req)
	if err != nil {
		return err
	}
	value, err := key.signMessage(base)
	if err != nil {
		return err
	}
	sp, err := sig.SignatureParams()
	if err != nil {
		return err
	}
	setDictMember(req.Header, "Signature-Input", o.Label, sp)
	sv, _ := appendBare(nil, bytesItem(value))
	setDictMember(req.Header, "Signature", o.Label, string(sv))
	return nil
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// setDictMember sets member key of the dictionary field name to the
// serialized value, keeping the other members (in place when key exists)
// when the existing field parses as a dictionary; otherwise the field is
// replaced.
func setDictMember(h http.Header, name, key, value string) {
	var b []byte
	replaced := false
	if vals := h.Values(name); len(vals) > 0 {
		if ms, err := parseDict(joinLines(vals), 0); err == nil {
			for i := range ms {
				if len(b) > 0 {
					b = append(b, ", "...)
				}
				b = append(b, ms[i].key...)
				if ms[i].key == key {
					b = append(b, '=')
					b = append(b, value...)
					replaced = true
					continue
				}
				if !ms[i].inner && ms[i].item.val.kind == kindBoolean && ms[i].item.val.t {
					b, _ = appendParams(b, ms[i].item.params)
					continue
				}
				b = append(b, '=')
				var ok bool
				if b, ok = appendMemberValue(b, &ms[i]); !ok {
					b, replaced = nil, false
					break
				}
			}
		}
	}
	if !replaced {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, key...)
		b = append(b, '=')
		b = append(b, value...)
	}
	h.Set(name, string(b))
}

// SignatureHeaders are the headers of a signed request, as printed by
// `idcli agent headers`.
type SignatureHeaders struct {
	Signature      string `json:"Signature"`
	SignatureInput string `json:"Signature-Input"`
	SignatureAgent string `json:"Signature-Agent,omitempty"`
	// SignedAgentMetadata is set when Options.Metadata is.
	SignedAgentMetadata string `json:"Signed-Agent-Metadata,omitempty"`
}

// Headers returns the signature headers for a request with this method and
// URL (no body), signed with key under opts.
func Headers(method, rawURL string, key PrivateKey, opts Options) (SignatureHeaders, error) {
	if method == "" {
		method = http.MethodGet
	}
	if strings.ContainsAny(method, " \t\r\n") {
		return SignatureHeaders{}, fmt.Errorf("signer: invalid method %q", Truncate(method))
	}
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		return SignatureHeaders{}, fmt.Errorf("signer: %w", err)
	}
	if req.URL.Scheme == "" || req.URL.Host == "" {
		return SignatureHeaders{}, fmt.Errorf("signer: URL %q needs a scheme and a host", Truncate(rawURL))
	}
	if err := Sign(req, key, opts); err != nil {
		return SignatureHeaders{}, err
	}
	return SignatureHeaders{
		Signature:           req.Header.Get("Signature"),
		SignatureInput:      req.Header.Get("Signature-Input"),
		SignatureAgent:      req.Header.Get("Signature-Agent"),
		SignedAgentMetadata: req.Header.Get(MetadataHeader),
	}, nil
}

// Transport is an http.RoundTripper that signs a clone of each request with
// Key under Options before passing it to Base. The caller's request is never
// modified. Because signing happens per round trip, redirects and retries
// are signed afresh (with a new nonce and the new hop's authority).
//
// A refusal that names what to cover (Accept-Signature, or Signature-Error
// invalid_input with required_input) or a clock_skew refusal is retried
// once, re-signed, within bounds docs/signing.md ("Retries") lists: same
// host only, a body only when GetBody can replay it, components and
// parameters only added, never removed.
type Transport struct {
	// Base sends the signed request. If nil, http.DefaultTransport.
	Base http.RoundTripper
	// Key signs. Required.
	Key PrivateKey
	// Options for every request.
	Options Options
	// NoRetry turns the one re-signed retry off: every answer is returned
	// as it came.
	NoRetry bool
	// SignWhenChallenged sends each request unsigned, and signs and sends
	// it again (once) only when the answer is a signature challenge.
	SignWhenChallenged bool
	// Sleep waits out a clock_skew refusal before the retry. If nil, a
	// timer that ends early, with ctx's error, when ctx is done.
	Sleep func(ctx context.Context, d time.Duration) error
}

// RoundTrip implements http.RoundTripper. It closes the request body on
// every error path, as the RoundTripper contract requires.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	clone := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		// Read through the original so it is consumed and closed once;
		// the clone gets a fresh, rewindable copy.
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("signer: read body: %w", err)
		}
		clone.Body = io.NopCloser(strings.NewReader(string(b)))
		clone.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(string(b))), nil }
		clone.ContentLength = int64(len(b))
	}
	opts := t.Options
	if !t.SignWhenChallenged {
		if opts.Created.IsZero() {
			// Pinned, so that a clock_skew answer can be compared with it.
			opts.Created = opts.withDefaults().Now()
		}
		if err := Sign(clone, t.Key, opts); err != nil {
			if clone.Body != nil {
				clone.Body.Close()
			}
			return nil, err
		}
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(clone)
	if err != nil || t.NoRetry {
		return resp, err
	}
	return t.retry(req, clone, resp, opts, base)
}
