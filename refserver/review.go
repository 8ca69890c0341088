package refserver

// The agents of registration mode approval: pending an operator's review,
// an agent's directory lists no key and its signed requests are refused
// with 403 agent_pending; rejected, with 403 agent_rejected for good. The
// key source refuses them as it refuses a disabled agent, before the
// signature is checked, so that nothing an agent not let in signs ever
// verifies; the operator's reason for a rejection is its owner's to read,
// and is told only to a request that verifies with the agent's key: a
// registration of that key, or /whoami (see rejectedWhoami), which
// `idcli agent status` sends.

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// statePending is the "state" of an answer about an agent pending review.
const statePending = "pending"

// Review states of a cached key's agent (keyEntry.review).
const (
	reviewNone     uint8 = iota // let in
	reviewPending               // pending an operator's review
	reviewRejected              // rejected by an operator
)

// errPending refuses to act for the agent uid, pending review.
func errPending(uid string) *middleware.Error {
	return middleware.Fail(codeAgentPending,
		"agent %s is pending review: the operator of this service has not approved it yet", uid)
}

// errRejected refuses to act for the agent uid, which an operator
// rejected for reason ("": not told).
func errRejected(uid, reason string) *middleware.Error {
	if reason == "" {
		return middleware.Fail(codeAgentRejected, "agent %s was rejected by the operator of this service", uid)
	}
	return middleware.Fail(codeAgentRejected, "agent %s was rejected by the operator of this service: %s", uid, reason)
}

// rejection is the cause of the key source's refusal of a rejected
// agent's key: the key and the operator's reason, for rejectedWhoami.
type rejection struct {
	uid, reason string
	pk          signer.PublicKey
}

func (r *rejection) Error() string { return "refserver: agent " + r.uid + " rejected" }

// refusedKey is the key source's refusal of key e of agent uid, or nil
// when e's agent may sign: rejected, pending review, disabled.
func refusedKey(uid string, e *keyEntry) error {
	switch {
	case e.review == reviewRejected:
		me := errRejected(uid, "")
		me.Err = &rejection{uid: uid, reason: e.reason, pk: e.pk}
		return me
	case e.review == reviewPending:
		return errPending(uid)
	case e.disabled:
		return &middleware.Error{Code: middleware.CodeForbidden,
			Message: fmt.Sprintf("agent %s has been disabled by the operator of this service", uid), Err: errAgentDisabled}
	}
	return nil
}

// rejectedWhoami answers /whoami signed with the key of a rejected agent
// (refused is the key source's refusal, res's): when the signature
// verifies with that key, 403 agent_rejected with the operator's reason;
// else the refusal of the signature (invalid_signature, a replayed
// nonce…), which tells nothing of the agent. The check is made by
// verify.owner, which reports to no metric or status page: the request
// was counted refused once already.
func (s *Server) rejectedWhoami(r *http.Request, refused error) error {
	var rj *rejection
	if !errors.As(refused, &rj) {
		return refused
	}
	v := s.verify.owner
	if err := refuse(v, v.CheckSigned(v.Parse(r), possessionKey{rj.pk})); err != nil {
		return err
	}
	return &refusal{v: s.verify.agent, err: errRejected(rj.uid, rj.reason)}
}
