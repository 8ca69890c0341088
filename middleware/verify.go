package middleware

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/dunglas/httpsfv"
)

// Defaults of the web-bot-auth verification policy (DESIGN §4).
const (
	DefaultMaxWindow    = 10 * time.Minute
	DefaultSkew         = 60 * time.Second
	DefaultMaxBodyBytes = 1 << 20
)

// Verifier checks signed requests against a policy. It is safe for
// concurrent use; build it once with NewVerifier.
type Verifier struct {
	cfg             Config
	required        []signer.Component
	acceptSignature string

	agents      agentCache      // parsed Signature-Agent values
	thumbprints thumbprintCache // RFC 7638 thumbprints of keys seen
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Keys == nil {
		return errors.New("middleware: Config.Keys is required")
	}
	if c.MaxBodyBytes < 0 {
		return errors.New("middleware: Config.MaxBodyBytes must not be negative")
	}
	for _, n := range c.RequiredComponents {
		if _, err := signer.ParseComponent(n); err != nil {
			return fmt.Errorf("middleware: Config.RequiredComponents: %w", err)
		}
	}
	for i := 0; i < len(c.Tag); i++ {
		if c.Tag[i] < 0x20 || c.Tag[i] > 0x7e {
			return fmt.Errorf("middleware: Config.Tag %q is not printable ASCII", c.Tag)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Replay == nil {
		c.Replay = NewMemoryReplayStoreWithClock(c.Now)
	}
	if c.Tag == "" {
		c.Tag = signer.DefaultTag
	}
	if c.MaxWindow == 0 {
		c.MaxWindow = DefaultMaxWindow
	}
	if c.Skew == 0 {
		c.Skew = DefaultSkew
	} else if c.Skew < 0 {
		c.Skew = 0
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// NewVerifier validates cfg and returns a Verifier.
func NewVerifier(cfg Config) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Verifier{cfg: cfg.withDefaults()}
	v.agents.m = map[string]signer.SignatureAgent{}
	v.thumbprints.m = map[[ed25519.PublicKeySize]byte]string{}
	for _, n := range cfg.RequiredComponents {
		c, _ := signer.ParseComponent(n)
		v.required = append(v.required, c)
	}
	as, err := acceptSignature(v.cfg, v.required)
	if err != nil {
		return nil, err
	}
	v.acceptSignature = as
	return v, nil
}

// acceptSignature builds the Accept-Signature field (RFC 9421 §5.1) that 401
// responses carry: the components and parameters this verifier requires.
func acceptSignature(cfg Config, required []signer.Component) (string, error) {
	ids := []string{`"@authority"`}
	add := func(id string) {
		for _, x := range ids {
			if x == id {
				return
			}
		}
		ids = append(ids, id)
	}
	for _, c := range required {
		add(c.ID())
	}
	if cfg.RequireBound {
		add(`"signature-agent";key="sig1"`)
	}
	il := httpsfv.InnerList{Params: httpsfv.NewParams()}
	for _, id := range ids {
		it, err := httpsfv.UnmarshalItem([]string{id})
		if err != nil {
			return "", fmt.Errorf("middleware: Accept-Signature: %w", err)
		}
		il.Items = append(il.Items, it)
	}
	il.Params.Add("alg", "ed25519")
	il.Params.Add("keyid", true)
	il.Params.Add("created", true)
	if !cfg.AllowMissingExpires {
		il.Params.Add("expires", true)
	}
	if !cfg.AllowMissingNonce {
		il.Params.Add("nonce", true)
	}
	il.Params.Add("tag", cfg.Tag)
	d := httpsfv.NewDictionary()
	d.Add(signer.DefaultLabel, il)
	return httpsfv.Marshal(d)
}

// New returns the verification middleware. It panics if cfg is invalid;
// call cfg.Validate first to report that cleanly.
func New(cfg Config) func(http.Handler) http.Handler {
	v, err := NewVerifier(cfg)
	if err != nil {
		panic(err)
	}
	return v.Middleware
}

// Middleware verifies each request before next runs. A verified request's
// context carries the Agent (AgentFrom). Failures get the JSON error body;
// 401s also carry Accept-Signature.
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v.cfg.Optional && len(r.Header.Values("Signature")) == 0 && len(r.Header.Values("Signature-Input")) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		a, err := v.Verify(r)
		if err != nil {
			v.WriteError(w, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithAgent(r.Context(), a)))
	})
}

// WriteError writes a verification failure: the JSON error body, plus
// Accept-Signature on 401.
func (v *Verifier) WriteError(w http.ResponseWriter, err error) {
	e := AsError(err)
	if e.Status() == http.StatusUnauthorized {
		w.Header().Set("Accept-Signature", v.acceptSignature)
	}
	WriteError(w, e)
}

// Verify checks r against the policy of DESIGN §4, cheapest step first, and
// returns the verified identity or an *Error with the code of DESIGN §6.
// The nonce is recorded only after the signature (and digest) verified.
func (v *Verifier) Verify(r *http.Request) (Agent, error) {
	a, err := v.verify(r)
	if err != nil && v.cfg.Logger.Enabled(r.Context(), slog.LevelDebug) {
		v.cfg.Logger.LogAttrs(r.Context(), slog.LevelDebug, "signature rejected",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	}
	return a, err
}

func (v *Verifier) verify(r *http.Request) (Agent, error) {
	cfg := &v.cfg
	in, sv := r.Header.Values("Signature-Input"), r.Header.Values("Signature")
	if len(in) == 0 && len(sv) == 0 {
		return Agent{}, Fail(CodeMissingSignature, "the request is not signed: Signature and Signature-Input are required")
	}
	if len(in) == 0 || len(sv) == 0 {
		return Agent{}, Fail(CodeInvalidSignatureInput, "Signature and Signature-Input must both be present")
	}

	// 1. Parse and pick the signature by tag.
	sigs, err := signer.ParseSignatures(in, sv)
	if err != nil {
		return Agent{}, &Error{Code: CodeInvalidSignatureInput, Message: trimPrefix(err), Err: err}
	}
	var sig *signer.Signature
	for i := range sigs {
		if sigs[i].Params.Tag == cfg.Tag {
			if sig != nil {
				return Agent{}, Fail(CodeInvalidSignatureInput, "more than one signature has tag=%q", cfg.Tag)
			}
			sig = &sigs[i]
		}
	}
	if sig == nil {
		if !cfg.AnyTag || len(sigs) != 1 {
			return Agent{}, Fail(CodeInvalidSignatureInput, "no signature has tag=%q", cfg.Tag)
		}
		sig = &sigs[0]
	}
	p := &sig.Params

	// 2. Covered components: @authority or @target-uri, the required ones,
	// each present in the request (building the base checks presence and
	// re-serializes @signature-params from the parsed inner list).
	if !sig.Covers(`"@authority"`) && !sig.Covers(`"@target-uri"`) {
		return Agent{}, Fail(CodeMissingComponents, "the signature must cover @authority or @target-uri")
	}
	for i := range v.required {
		if !covers(sig, &v.required[i]) {
			return Agent{}, Fail(CodeMissingComponents, "the signature must cover %s", v.required[i].ID())
		}
	}
	base, err := sig.Base(r)
	if err != nil {
		if errors.Is(err, signer.ErrMissingComponent) {
			return Agent{}, &Error{Code: CodeMissingComponents, Message: trimPrefix(err), Err: err}
		}
		return Agent{}, &Error{Code: CodeInvalidSignatureInput, Message: trimPrefix(err), Err: err}
	}

	// 3. Parameters.
	if p.Alg != "" && p.Alg != "ed25519" {
		return Agent{}, Fail(CodeUnsupportedAlgorithm, "alg %q is not supported, want \"ed25519\"", p.Alg)
	}
	if !p.HasCreated {
		return Agent{}, Fail(CodeInvalidSignatureInput, "the created parameter is required")
	}
	if !p.HasExpires && !cfg.AllowMissingExpires {
		return Agent{}, Fail(CodeInvalidSignatureInput, "the expires parameter is required")
	}
	if p.KeyID == "" {
		return Agent{}, Fail(CodeInvalidSignatureInput, "the keyid parameter is required")
	}
	if p.Nonce == "" && !cfg.AllowMissingNonce {
		return Agent{}, Fail(CodeMissingNonce, "the nonce parameter is required")
	}

	// 4. Validity window.
	now := cfg.Now()
	created := time.Unix(p.Created, 0)
	expires := created.Add(cfg.MaxWindow)
	if p.HasExpires {
		expires = time.Unix(p.Expires, 0)
	}
	if created.After(now.Add(cfg.Skew)) {
		return Agent{}, Fail(CodeNotYetValid, "signature created at %s, in the future", created.UTC().Format(time.RFC3339))
	}
	if p.HasExpires && p.Expires < p.Created {
		return Agent{}, Fail(CodeInvalidSignatureInput, "expires is before created")
	}
	if (p.HasExpires || cfg.MaxWindow > 0) && now.After(expires.Add(cfg.Skew)) {
		return Agent{}, Fail(CodeExpiredSignature, "signature expired at %s", expires.UTC().Format(time.RFC3339))
	}
	if cfg.MaxWindow > 0 && p.HasExpires && expires.Sub(created) > cfg.MaxWindow {
		return Agent{}, Fail(CodeWindowTooLong, "expires-created is %s, at most %s is accepted", expires.Sub(created), cfg.MaxWindow)
	}

	// 5. Signature agent.
	agent, bound, err := v.signatureAgent(r, sig)
	if err != nil {
		return Agent{}, err
	}

	// 6. Key.
	pk, err := cfg.Keys.Key(r.Context(), agent, p.KeyID)
	if err != nil {
		return Agent{}, keyError(err, agent, p.KeyID)
	}
	if len(pk.Key) != ed25519.PublicKeySize || !cfg.AllowAnyKeyID && v.thumbprints.get(pk.Key) != p.KeyID {
		return Agent{}, Fail(CodeUnknownKey, "key %q is not the thumbprint of the published key", p.KeyID)
	}

	// 7. Ed25519 over the rebuilt base.
	if !ed25519.Verify(pk.Key, base, sig.Value) {
		return Agent{}, Fail(CodeInvalidSignature, "the signature does not verify with key %q", p.KeyID)
	}

	// 8. Content-Digest.
	if sig.Covers(`"content-digest"`) {
		body, err := readBody(r, cfg.MaxBodyBytes)
		if err != nil {
			if errors.Is(err, signer.ErrBodyTooLarge) {
				return Agent{}, Fail(CodePayloadTooLarge, "the body is larger than %d bytes", cfg.MaxBodyBytes)
			}
			return Agent{}, &Error{Code: CodeInvalidRequest, Message: "the body could not be read", Err: err}
		}
		if err := signer.VerifyContentDigest(r.Header.Values("Content-Digest"), body); err != nil {
			return Agent{}, &Error{Code: CodeDigestMismatch, Message: "Content-Digest does not match the body", Err: err}
		}
	}

	// 9. Replay.
	if p.Nonce != "" {
		seen, err := cfg.Replay.Seen(r.Context(), p.KeyID+" "+p.Nonce, expires.Add(cfg.Skew))
		if err != nil {
			return Agent{}, &Error{Code: CodeDatabaseUnavailable, Message: "the replay store is unavailable", Err: fmt.Errorf("%w: %w", ErrReplayStore, err)}
		}
		if seen {
			return Agent{}, Fail(CodeReplayedNonce, "nonce already used with key %q", p.KeyID)
		}
	}

	a := Agent{
		KeyID:          p.KeyID,
		JWK:            pk.JWK.Public(),
		SignatureAgent: agent,
		Created:        created,
		Nonce:          p.Nonce,
		Label:          sig.Label,
		Tag:            p.Tag,
		Bound:          bound,
		Components:     make([]string, len(sig.Components)),
	}
	if p.HasExpires {
		a.Expires = expires
	}
	for i, c := range sig.Components {
		a.Components[i] = c.ID()
	}
	if agent != "" {
		a.DirectoryURL = agent + signer.DirectoryPath
		a.UID = signer.UIDFromOrigin(agent)
	}
	return a, nil
}

// signatureAgent picks the Signature-Agent origin that applies to sig
// (DESIGN §4 step 5) and reports whether it is covered.
func (v *Verifier) signatureAgent(r *http.Request, sig *signer.Signature) (string, bool, error) {
	vals := r.Header.Values("Signature-Agent")
	if len(vals) == 0 {
		if v.cfg.AllowMissingSignatureAgent {
			return "", false, nil
		}
		return "", false, Fail(CodeInvalidSignatureAgent, "the Signature-Agent header is required")
	}
	sa, err := v.agents.parse(vals)
	if err != nil {
		return "", false, &Error{Code: CodeInvalidSignatureAgent, Message: trimPrefix(err), Err: err}
	}
	var (
		origin string
		ok     bool
		bound  bool
	)
	c, covered := sig.CoversName("signature-agent")
	switch {
	case covered && c.Key != "":
		// The covered `"signature-agent";key=…` names the member.
		bound = true
		origin, ok = sa.Member(c.Key)
	default:
		// The whole field is covered (web-bot-auth 0.1.3), or nothing is:
		// the member keyed by the label, else the only one.
		bound = covered
		if origin, ok = sa.Member(sig.Label); !ok {
			origin, ok = sa.Only()
		}
	}
	if !ok {
		return "", false, Fail(CodeInvalidSignatureAgent, "Signature-Agent has no member for signature %q", sig.Label)
	}
	if v.cfg.RequireBound && !bound {
		return "", false, Fail(CodeMissingComponents, `the signature must cover "signature-agent"`)
	}
	return origin, bound, nil
}

func keyError(err error, agent, keyID string) *Error {
	switch {
	case errors.Is(err, signer.ErrUnknownKey):
		return &Error{Code: CodeUnknownKey, Message: fmt.Sprintf("key %q is not published by %s", keyID, orNone(agent)), Err: err}
	case errors.Is(err, signer.ErrRevokedKey):
		return &Error{Code: CodeRevokedKey, Message: fmt.Sprintf("key %q has been revoked", keyID), Err: err}
	case errors.Is(err, signer.ErrUntrustedAgent):
		return &Error{Code: CodeUntrustedAgent, Message: fmt.Sprintf("signature agent %s is not trusted", orNone(agent)), Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeKeyFetchFailed, Message: "the request was cancelled while fetching the key", Err: err}
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeKeyFetchFailed, Message: fmt.Sprintf("the key directory of %s could not be fetched", orNone(agent)), Err: err}
}

func orNone(agent string) string {
	if agent == "" {
		return "the key source"
	}
	return agent
}

// trimPrefix drops the "signer: " package prefix for client messages.
func trimPrefix(err error) string {
	return strings.TrimPrefix(err.Error(), "signer: ")
}

// covers reports whether sig covers the required component c: the same
// identifier, or the same name when c carries no parameters.
func covers(sig *signer.Signature, c *signer.Component) bool {
	if c.Key == "" && !c.SF && c.Param == "" {
		_, ok := sig.CoversName(c.Name)
		return ok
	}
	return sig.Covers(c.ID())
}

// agentCacheSize bounds the cache of parsed Signature-Agent values; when it
// is full it is emptied. agentCacheMaxLen is the longest value cached.
const (
	agentCacheSize   = 1024
	agentCacheMaxLen = 512
)

// agentCache remembers parsed Signature-Agent fields by their text: an
// agent sends the same value on every request, so parsing is done once.
// A SignatureAgent is read-only after parsing, so sharing it is safe.
type agentCache struct {
	mu sync.RWMutex
	m  map[string]signer.SignatureAgent
}

func (c *agentCache) parse(vals []string) (signer.SignatureAgent, error) {
	if len(vals) != 1 || len(vals[0]) > agentCacheMaxLen {
		return signer.ParseSignatureAgent(vals)
	}
	c.mu.RLock()
	sa, ok := c.m[vals[0]]
	c.mu.RUnlock()
	if ok {
		return sa, nil
	}
	sa, err := signer.ParseSignatureAgent(vals)
	if err != nil {
		return sa, err
	}
	c.mu.Lock()
	if len(c.m) >= agentCacheSize {
		clear(c.m)
	}
	c.m[vals[0]] = sa
	c.mu.Unlock()
	return sa, nil
}

// thumbprintCacheSize bounds the cache of key thumbprints.
const thumbprintCacheSize = 4096

// thumbprintCache remembers the RFC 7638 thumbprint of each public key, so
// the keyid check costs a map lookup instead of a SHA-256 and two encodings.
type thumbprintCache struct {
	mu sync.RWMutex
	m  map[[ed25519.PublicKeySize]byte]string
}

// get returns the thumbprint of pub, which must be 32 bytes long.
func (c *thumbprintCache) get(pub ed25519.PublicKey) string {
	k := [ed25519.PublicKeySize]byte(pub)
	c.mu.RLock()
	t, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return t
	}
	t = signer.Thumbprint(pub)
	c.mu.Lock()
	if len(c.m) >= thumbprintCacheSize {
		clear(c.m)
	}
	c.m[k] = t
	c.mu.Unlock()
	return t
}

// readBody reads r's body, at most limit bytes, and puts back a reader over
// the bytes read so the handler sees the same body. The original body is
// closed. A body longer than limit gives signer.ErrBodyTooLarge (and an
// empty body for the handler). It is signer.ReadBody with one buffer sized
// from Content-Length, so the common case allocates twice.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	defer r.Body.Close()
	size := int64(512)
	if n := r.ContentLength; n >= 0 && n < limit {
		size = n + 1 // room to see EOF without growing
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			r.Body = http.NoBody
			return nil, signer.ErrBodyTooLarge
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			r.Body = http.NoBody
			return nil, fmt.Errorf("middleware: read body: %w", err)
		}
	}
	rb := &restoredBody{}
	rb.Reset(buf)
	r.Body = rb
	r.ContentLength = int64(len(buf))
	return buf, nil
}

// restoredBody is the request body put back after the digest check.
type restoredBody struct{ bytes.Reader }

func (*restoredBody) Close() error { return nil }
