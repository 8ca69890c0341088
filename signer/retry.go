package signer

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// Bounds of Transport's one retry.
const (
	// maxSkewWait is the longest clock_skew wait: a verifier further
	// behind is not waited for.
	maxSkewWait = 60 * time.Second
)

// retry answers resp, the answer to clone (sent for req under sent, signed
// unless t.SignWhenChallenged), with at most one more round trip: when
// resp is a challenge this signer can meet, req is re-signed and sent
// again. Otherwise resp is returned as it came.
func (t *Transport) retry(req, clone *http.Request, resp *http.Response, sent Options, base http.RoundTripper) (*http.Response, error) {
	next, wait, ok := t.answer(req, clone, resp, sent)
	if !ok {
		return resp, nil
	}
	again := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		b, err := req.GetBody() // answer checked it is set
		if err != nil {
			return resp, nil
		}
		again.Body = b
	}
	if err := Sign(again, t.Key, next); err != nil {
		// A component the request lacks, a label that is not a key: the
		// challenge asks for what this request cannot give.
		if again.Body != nil {
			again.Body.Close()
		}
		return resp, nil
	}
	if wait > 0 {
		if err := t.sleep(req.Context(), wait); err != nil {
			if again.Body != nil {
				again.Body.Close()
			}
			resp.Body.Close()
			return nil, err
		}
	}
	// Closed unread: a server that trickles its refusal's body must not
	// hold the retry (the connection is not reused, which is all it costs).
	resp.Body.Close()
	return base.RoundTrip(again)
}

// answer decides whether resp is a challenge to act on, and returns the
// options to sign the retry with and how long to wait before it.
func (t *Transport) answer(req, clone *http.Request, resp *http.Response, sent Options) (Options, time.Duration, bool) {
	acceptSig := resp.Header.Values("Accept-Signature")
	sigErr := resp.Header.Values("Signature-Error")
	switch {
	case len(acceptSig) == 0 && len(sigErr) == 0:
		return Options{}, 0, false
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusBadRequest:
	case resp.StatusCode == http.StatusForbidden && len(sigErr) > 0:
		// A 403 without Signature-Error is a policy refusal: signing
		// differently does not change it.
	default:
		return Options{}, 0, false
	}
	if !sameTarget(req, resp.Request) {
		return Options{}, 0, false
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return Options{}, 0, false // the body cannot be sent again
	}
	o := sent.withDefaults()
	ch, err := parseChallenge(acceptSig, sigErr, o.Label, o.Tag, AlgEd25519)
	if err != nil {
		return Options{}, 0, false
	}
	next := t.Options
	if ch.found {
		next.Label = ch.label
	}
	next.Components = mergeComponents(next.Components, ch.components)
	if ch.nonce {
		next.NoNonce = false
	}
	if ch.nonceValue != "" {
		next.Nonce = ch.nonceValue
	}
	if t.SignWhenChallenged {
		// Any signature challenge is a reason to sign.
		return next, 0, ch.found || ch.errCode != ""
	}
	if ch.errCode == "clock_skew" {
		wait, ok := skewWait(resp.Header, o.Created)
		if !ok {
			return Options{}, 0, false
		}
		if d, has := req.Context().Deadline(); has && time.Until(d) < wait {
			return Options{}, 0, false // the call would end before the retry
		}
		next.Created = o.Created // the same created, once the verifier reaches it
		return next, wait, true
	}
	return next, 0, adds(clone, o.Label, ch)
}

// sameTarget reports whether the answered request went to req's scheme
// and host: a challenge is obeyed only for the host that was asked.
func sameTarget(req, answered *http.Request) bool {
	return answered != nil && answered.URL != nil &&
		strings.EqualFold(answered.URL.Scheme, req.URL.Scheme) &&
		strings.EqualFold(answered.URL.Host, req.URL.Host)
}

// skewWait reads how long to wait out a clock_skew refusal: the response's
// Date (the verifier's clock) behind created, the created that was sent
// (whole seconds). A Date missing, unparseable or not behind created, or
// further behind than maxSkewWait, means no wait and no retry.
func skewWait(h http.Header, created time.Time) (time.Duration, bool) {
	vals := h.Values("Date")
	if len(vals) != 1 {
		return 0, false
	}
	date, err := http.ParseTime(vals[0])
	if err != nil {
		return 0, false
	}
	wait := time.Unix(created.Unix(), 0).Sub(date)
	if wait <= 0 || wait > maxSkewWait {
		return 0, false
	}
	return wait, true
}

// adds reports whether ch asks for more than the signature labelled label
// on clone gave: a component it did not cover, another label, a nonce it
// did not carry or a nonce of the server's. A challenge that adds nothing
// would be refused again.
func adds(clone *http.Request, label string, ch challenge) bool {
	if ch.found && ch.label != label {
		return true
	}
	sigs, err := ParseSignatures(clone.Header.Values("Signature-Input"), clone.Header.Values("Signature"))
	if err != nil {
		return false
	}
	for i := range sigs {
		s := &sigs[i]
		if s.Label != label {
			continue
		}
		if ch.nonce && s.Params.Nonce == "" || ch.nonceValue != "" && ch.nonceValue != s.Params.Nonce {
			return true
		}
		for _, c := range ch.components {
			if !coversID(s.Components, c.ID()) {
				return true
			}
		}
		return false
	}
	return false
}

func coversID(cs []Component, id string) bool {
	for _, c := range cs {
		if c.ID() == id {
			return true
		}
	}
	return false
}

// mergeComponents returns own (the default profile's when nil) followed by
// each of more it does not already cover: a challenge adds, never removes.
// A component without parameters is added by its bare name, the form Sign
// recognises for the fields it adds itself.
func mergeComponents(own []string, more []Component) []string {
	if own == nil {
		own = []string{"@authority"}
	}
	out := append([]string(nil), own...)
	have := make([]string, 0, len(out)+len(more))
	for _, n := range out {
		if c, err := ParseComponent(n); err == nil {
			have = append(have, c.ID())
		}
	}
	for _, c := range more {
		if containsString(have, c.ID()) {
			continue
		}
		have = append(have, c.ID())
		if c.ID() == `"`+c.Name+`"` {
			out = append(out, c.Name)
		} else {
			out = append(out, c.ID())
		}
	}
	return out
}

// sleep waits d, or until ctx is done.
func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if t.Sleep != nil {
		return t.Sleep(ctx, d)
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
