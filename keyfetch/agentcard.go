package keyfetch

import "github.com/agentid/agentid/signer"

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
