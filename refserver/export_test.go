package refserver

import (
	"context"

	"github.com/agentid/agentid/signer"
)

// WaitKeyLookup waits for the database lookup of kid in flight, if any
// (such as a background refresh). Tests only: a lookup of kid starting
// meanwhile would get no answer.
func (k *DBKeySource) WaitKeyLookup(kid string) {
	k.group.Do(kid, func() (any, error) { return nil, nil })
}

// RotateAgent rotates uid from its key signingKid to pk as PUT
// /agents/{uid}/keys does once both signatures are verified. Tests only:
// it rotates without looking up any key.
func (s *Server) RotateAgent(ctx context.Context, uid, signingKid string, pk signer.PublicKey) error {
	return s.rotateAgent(ctx, uid, signingKid, pk, nil)
}

// InstrumentGorm is instrumentGorm, for its test.
var InstrumentGorm = instrumentGorm

// Parses returns how many requests had their signature fields parsed for
// a route that checks them with CheckSigned.
func (s *Server) Parses() int64 { return s.parses.Load() }
