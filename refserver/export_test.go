package refserver

// WaitKeyLookup waits for the database lookup of kid in flight, if any
// (such as a background refresh). Tests only: a lookup of kid starting
// meanwhile would get no answer.
func (k *DBKeySource) WaitKeyLookup(kid string) {
	k.group.Do(kid, func() (any, error) { return nil, nil })
}
