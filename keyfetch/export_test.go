package keyfetch

import "github.com/agentid/agentid/signer"

// Waiters returns how many callers wait for the shared fetch of set (0
// when none is in flight), so tests can order their callers.
func (f *Fetcher) Waiters(set signer.KeySet) int {
	f.fmu.Lock()
	defer f.fmu.Unlock()
	if fl := f.flights[set.Kind.String()+" "+set.URL]; fl != nil {
		return fl.waiters
	}
	return 0
}

// ParseRegistry exposes the registry list parser to benchmarks.
func (f *Fetcher) ParseRegistry(body []byte) (entries, problems []string, err error) {
	return f.parseRegistry(body)
}

// ParseKeySet exposes the key-set parser to benchmarks.
func ParseKeySet(body []byte, maxKeys int) (keys []signer.PublicKey, problems []string, err error) {
	return parseKeySet(body, maxKeys, "key set")
}
