package keyfetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/redact"
)

// Card is what a Signature Agent Card listed by a registry says about its
// agent (draft-meunier-webbotauth-registry), for policies, logs and status
// pages. Every string is cut to 256 bytes and stripped of control
// characters; it is the agent's own claim, vouched for only by the
// registry that lists the card.
type Card struct {
	// URL is the card's URL, as the registry lists it (normalised).
	URL string
	// Registry is the URL of the registry that lists it (the first, when
	// several do).
	Registry string
	// Name is "client_name" ("name" in early drafts).
	Name string
	// ClientURI and LogoURI are "client_uri" and "logo_uri".
	ClientURI, LogoURI string
	// Contacts is "contacts" (at most 8; "contact" in early drafts).
	Contacts []string
	// Purpose, Trigger, ProductToken and ExpectedUserAgent are the
	// web_bot_auth members "purpose", "trigger", "rfc9309-product-token"
	// and "expected-user-agent" (top-level members in early drafts).
	Purpose, Trigger, ProductToken, ExpectedUserAgent string
	// JWKSURI is the card's "jwks_uri", "" when its keys are inline.
	JWKSURI string
	// Fetched is when the card was last fetched successfully; zero when it
	// has not been (the registry lists it, but its fetch failed).
	Fetched time.Time
}

// cardState is what was learned of one listed card.
type cardState struct {
	card Card
	etag string
}

// CardInfo returns the Signature Agent Card describing the agent of the
// key set set, only when the card led to that key set: the card a
// registry lists at set's URL (the card is the key set: its "jwks", or the
// "jwks_uri" it names), else the card a registry lists whose jwks_uri is
// set's URL and on the card's own origin, else the first card a registry
// lists on the origin (scheme, host and port) whose well-known directory
// (with any query) set is; else, for a card key set (signer.KindCard) in the cache, that
// card as last fetched (Registry then ""). A card naming a jwks_uri on
// another origin describes no key set but its own URL: anyone may name
// anyone's key set, so its claims would describe another agent. ok is
// false when there is none. It does no I/O. The Contacts slice is a copy.
func (f *Fetcher) CardInfo(set signer.KeySet) (card Card, ok bool) {
	if set.IsZero() {
		return Card{}, false
	}
	var c *Card
	if rt := f.regTrust.Load(); rt != nil {
		if c = rt.cards[set.URL]; c == nil {
			c = rt.keySets[set.URL]
		}
		if c == nil {
			// The well-known directory, with any query: the origin's own
			// namespace (RFC 8615), not another tenant's path.
			if ks, err := signer.ParseKeySetURL(set.URL); err == nil && ks.WellKnown {
				if t, err := f.checkURL(set.URL); err == nil {
					c = rt.origins[t.origin()]
				}
			}
		}
	}
	if c == nil && set.Kind == signer.KindCard {
		if e := f.load(keyOf(set)); e != nil {
			c = e.card
		}
	}
	if c == nil {
		return Card{}, false
	}
	card = *c
	card.Contacts = slices.Clone(c.Contacts)
	return card, true
}

// AgentCard returns the Signature Agent Card of the verified agent whose
// key set is at keySetURL (middleware.Agent.DirectoryURL): CardInfo's
// answer for that key set, whatever its kind (a card fetched as the key
// set itself is found too). It does no I/O, for access logs, status pages
// and policies.
func (f *Fetcher) AgentCard(keySetURL string) (Card, bool) {
	return f.CardInfo(signer.KeySet{URL: keySetURL, Kind: signer.KindCard})
}

// AgentName returns the name and purpose of AgentCard's card, "" for none:
// the shape of package proxy's Config.AgentCard hook.
func (f *Fetcher) AgentName(keySetURL string) (name, purpose string) {
	c, _ := f.AgentCard(keySetURL)
	return c.Name, c.Purpose
}

// parseCard decodes a Signature Agent Card fetched from cardURL: a JSON
// object whose "jwks" member holds a key set or whose "jwks_uri" member
// names one, never both (RFC 7591 §2: the two MUST NOT both be present).
// A "client_id" member must name cardURL (the client ID metadata document
// rule that the card drafts take over); a card without one, as early
// drafts wrote them, is accepted. It returns the inline key set, if any,
// and the card's description with its jwks_uri (cardInfo).
func parseCard(body []byte, cardURL string) (jwks json.RawMessage, card Card, err error) {
	var doc map[string]json.RawMessage
	if err := decodeOne(body, &doc); err != nil || doc == nil {
		return nil, Card{}, fmt.Errorf("card is not a JSON object: %v", err)
	}
	var jwksURI string
	if raw, ok := doc["jwks_uri"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &jwksURI); err != nil || jwksURI == "" {
			return nil, Card{}, errors.New(`card "jwks_uri" is not a non-empty string`)
		}
	}
	if raw, ok := doc["jwks"]; ok && string(raw) != "null" {
		jwks = raw
	}
	switch {
	case jwks != nil && jwksURI != "":
		return nil, Card{}, errors.New(`card has both "jwks" and "jwks_uri", which RFC 7591 §2 forbids`)
	case jwks == nil && jwksURI == "":
		return nil, Card{}, errors.New(`card has neither "jwks" nor "jwks_uri"`)
	}
	if err := checkClientID(doc["client_id"], cardURL); err != nil {
		return nil, Card{}, err
	}
	return jwks, cardInfo(doc, jwksURI), nil
}

// checkClientID checks a card's "client_id" member (raw, nil when absent)
// against the URL the card was fetched from, cardURL (normalised as
// signer.ParseKeySetURL normalises). The client_id matches when it is
// cardURL exactly or another spelling of it (host case, default port,
// percent-encoding of unreserved characters, dot segments): those name
// one document, so an identity cannot be multiplied by them.
func checkClientID(raw json.RawMessage, cardURL string) error {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	var id string
	if json.Unmarshal(raw, &id) != nil || id == "" {
		return errors.New(`card "client_id" is not a non-empty string`)
	}
	if id == cardURL {
		return nil
	}
	// An origin-only client_id would resolve to the origin's well-known
	// directory: it never names a card.
	if u, err := url.Parse(id); err == nil && u.Scheme != "" && u.Path != "" && u.Path != "/" {
		if ks, err := signer.ParseKeySetURL(id); err == nil && ks.URL == cardURL {
			return nil
		}
	}
	return fmt.Errorf(`card "client_id" %q is not the URL the card was fetched from, %s`, clean(signer.Truncate(id)), cardURL)
}

// sameOrigin reports whether a and b, two URLs, share their scheme, host
// and port (after the trust policy's normalisation).
func (f *Fetcher) sameOrigin(a, b string) bool {
	ta, err := f.checkURL(a)
	if err != nil {
		return false
	}
	tb, err := f.checkURL(b)
	return err == nil && ta.origin() == tb.origin()
}

// fetchCards fetches each card of l's list, registryWorkers at a time,
// keeping what was last read of a card whose fetch fails.
func (f *Fetcher) fetchCards(ctx context.Context, l *registryList) {
	type result struct {
		cs  *cardState
		err error
	}
	results := make([]result, len(l.entries))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(registryWorkers, len(l.entries)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i].cs, results[i].err = f.fetchCard(ctx, l.url, l.entries[i], l.cards[l.entries[i]])
			}
		}()
	}
feed:
	for i := range l.entries {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	for i, u := range l.entries {
		res := results[i]
		switch {
		case res.cs != nil:
			l.cards[u] = res.cs
		case res.err == nil: // not fetched: the refresh ran out of time
			res.err = fmt.Errorf("card %s not fetched: %v", u, ctx.Err())
			fallthrough
		default:
			if l.cards[u] == nil {
				l.cards[u] = &cardState{card: Card{URL: u, Registry: l.url}}
			}
			if len(l.problems) < maxProblems {
				l.problems = append(l.problems, strings.TrimPrefix(res.err.Error(), "keyfetch: "))
			}
			f.cfg.Logger.Debug("keyfetch: registry card not fetched", "registry", redact.URL(l.url), "card", u, "err", res.err)
		}
	}
}

// fetchCard fetches the card at u (listed by registry), conditionally when
// prev holds an ETag. It returns the new state, or an error (prev stays).
func (f *Fetcher) fetchCard(ctx context.Context, registry, u string, prev *cardState) (*cardState, error) {
	tctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	d := docRequest{
		url: u, accept: acceptHeader(signer.KindCard), maxBytes: f.cfg.MaxBodyBytes, listed: true,
		accepts:    func(mt string) bool { return accepts(signer.KindCard, mt) },
		mediaTypes: mediaTypes(signer.KindCard),
	}
	if prev != nil && !prev.card.Fetched.IsZero() {
		d.etag = prev.etag
	}
	r, err := f.fetchDoc(tctx, d)
	switch {
	case err != nil:
		return nil, err
	case r.notFound:
		return nil, &FetchError{URL: u, StatusCode: r.status, Err: fmt.Errorf("card: status %d", r.status)}
	case r.notModified:
		cs := *prev
		cs.card.Fetched = f.cfg.Now()
		return &cs, nil
	}
	_, card, err := parseCard(r.body, u)
	if err != nil {
		return nil, &FetchError{URL: u, StatusCode: r.status, Err: err}
	}
	card.URL, card.Registry, card.Fetched = u, registry, f.cfg.Now()
	return &cardState{card: card, etag: r.etag}, nil
}

// cardInfo reads the description of a Signature Agent Card from its
// decoded members doc, with jwksURI its jwks_uri. Members of the
// web_bot_auth object win over top-level ones of the same name (early
// drafts had them at the top level).
func cardInfo(doc map[string]json.RawMessage, jwksURI string) Card {
	var wba map[string]json.RawMessage
	_ = json.Unmarshal(doc["web_bot_auth"], &wba)
	str := func(names ...string) string {
		for _, m := range []map[string]json.RawMessage{wba, doc} {
			for _, n := range names {
				var s string
				if json.Unmarshal(m[n], &s) == nil && s != "" {
					return clean(s)
				}
			}
		}
		return ""
	}
	c := Card{
		Name: str("client_name", "name"), ClientURI: str("client_uri"), LogoURI: str("logo_uri", "logo"),
		Purpose: str("purpose"), Trigger: str("trigger"), ProductToken: str("rfc9309-product-token"),
		ExpectedUserAgent: str("expected-user-agent"), JWKSURI: jwksURI,
	}
	var contacts []string
	if json.Unmarshal(doc["contacts"], &contacts) != nil || len(contacts) == 0 {
		if s := str("contact"); s != "" {
			contacts = []string{s}
		}
	}
	for _, s := range contacts {
		if s = clean(s); s != "" && len(c.Contacts) < maxCardContacts {
			c.Contacts = append(c.Contacts, s)
		}
	}
	return c
}

// clean cuts s to maxCardField bytes (on a rune boundary) and drops control
// and format characters, so a card cannot forge log lines.
func clean(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > maxCardField {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}
