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
