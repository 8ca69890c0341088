// Package keyfetch fetches, checks and caches signature agents' key sets
// without letting a request steer the server into its own network: a
// key-set URL's host must match the trust policy (TrustedHosts, or a
// registry's listed cards) before any I/O, and private addresses are
// refused when dialing.
//
//	keys := keyfetch.New(keyfetch.Config{TrustedHosts: []string{"*.agentid.example"}})
//	set, _ := signer.ParseKeySetURL("https://agent-x.agentid.example")
//	pk, err := keys.Key(ctx, set, keyid)
//	// errors.Is(err, signer.ErrUntrustedAgent): host not trusted, nothing was sent
//	// errors.Is(err, signer.ErrUnknownKey): the key set does not hold keyid
//	// errors.As(err, new(*keyfetch.FetchError)): the key set could not be fetched
//
// A *Fetcher satisfies middleware.KeySource and is safe for concurrent use.
// Key sets are directories, JWKS URLs and Signature Agent Cards
// (signer.KeySet); signed directories are verified when signed and can be
// required (RequireSignedDirectories). Each set is cached for its max-age,
// serves stale while refreshes fail, and is held on probation until a
// signature by one of its keys verifies (Fetcher.Verified). Config
// documents every bound and its default; LocalDevelopment is the Config for
// a reference server on this machine. docs/key-sets.md describes key sets,
// signed directories, the trust policy, registries and the cache in full.
package keyfetch
