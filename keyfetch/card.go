package keyfetch

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	"github.com/agentid/agentid/signer"
)

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
