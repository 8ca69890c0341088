package refserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// Registration modes of Config.Registration.
const (
	// RegistrationOpen: any key may register (POST /agents).
	RegistrationOpen = "open"
	// RegistrationClosed: POST /agents (and vestauth's POST /register) are
	// refused with 403 forbidden; registered agents keep working.
	RegistrationClosed = "closed"
	// RegistrationToken: a new agent registers only with an invitation
	// token (created with `idcli server tokens create`), sent in the
	// Agentid-Invite header and covered by the registration's signature;
	// each registration that creates an agent spends one use.
	RegistrationToken = "token"
	// RegistrationApproval: any key may register, but the agent it
	// creates is pending until an operator approves it (`idcli server
	// agents approve`): its directory lists no key and its signed requests
	// are refused with 403 agent_pending meanwhile; a rejected agent is
	// refused with 403 agent_rejected for good.
	RegistrationApproval = "approval"
)

// inviteComponent is the Agentid-Invite header as a covered component.
var inviteComponent = strings.ToLower(signer.InviteHeader)

// The invitation rule of registration mode token, enforced here only.
// Every registration request (POST /agents), whether its key is new or
// already registered, carries one Agentid-Invite header, covered by its
// signature (checkRegistrationMode, the registerInvite verifier), and the
// token it names must be known, not revoked and not expired, and either
// have a use left or be the token that created the agent of the already
// registered key (that agent retrying its own registration: an answer
// lost, `idcli agent init` run again). Anything else (an unknown or
// respelled token, an expired or revoked one, one used up by other
// registrations) is refused with one answer, errInviteRefused, whatever
// the key. A registration that creates an agent spends one use, in the
// transaction that creates it, and records the token on the agent
// (store.Agent.InviteTokenID); one that answers for a registered key spends
// none. Modes open and closed read no token.

// errInviteRefused answers a registration whose invitation token is not
// good (unknown, used up, expired or revoked: the client is not told which).
var errInviteRefused = middleware.Fail(middleware.CodeForbidden,
	"registration on this service needs an invitation token, and the one in %s is not valid (unknown, used up, expired or revoked); ask the operator for a new one", signer.InviteHeader)

// maxInviteLen bounds an Agentid-Invite value worth hashing.
const maxInviteLen = 128

// checkRegistrationMode refuses a registration request the mode forbids,
// before its body is read or its signature verified, and returns the
// invitation token to spend (token mode) and the verifier to check the
// proof of possession with (the default v, or, in token mode, one that
// also requires the Agentid-Invite header to be covered).
func (s *Server) checkRegistrationMode(r *http.Request, v *middleware.Verifier) (string, *middleware.Verifier, error) {
	switch s.cfg.Registration {
	case RegistrationClosed:
		return "", nil, middleware.Fail(middleware.CodeForbidden,
			"registration on this service is closed (registration mode %q): its operator registers no new agents", RegistrationClosed)
	case RegistrationToken:
		vals := r.Header.Values(signer.InviteHeader)
		switch {
		case len(vals) == 0 || vals[0] == "":
			return "", nil, middleware.Fail(middleware.CodeForbidden,
				"registration on this service needs an invitation token (registration mode %q): send it in the %s header, covered by the signature (idcli agent init --invite TOKEN)", RegistrationToken, signer.InviteHeader)
		case len(vals) > 1:
			return "", nil, middleware.Fail(middleware.CodeInvalidRequest, "send one %s header", signer.InviteHeader)
		case len(vals[0]) > maxInviteLen:
			return "", nil, errInviteRefused
		}
		if v == s.verify.compatRegister {
			// vestauth clients cannot send a token.
			return "", nil, middleware.Fail(middleware.CodeForbidden,
				"registration on this service needs an invitation token (registration mode %q), which POST /register cannot carry: use idcli agent init --invite TOKEN", RegistrationToken)
		}
		return vals[0], s.verify.registerInvite, nil
	}
	return "", v, nil
}

func validRegistration(mode string) error {
	switch mode {
	case "", RegistrationOpen, RegistrationClosed, RegistrationToken, RegistrationApproval:
		return nil
	}
	return fmt.Errorf("refserver: registration mode %q: want %s, %s, %s or %s", mode, RegistrationOpen, RegistrationClosed, RegistrationToken, RegistrationApproval)
}

// registerKey returns the agent holding pk, creating agent and key in one
// transaction when the key is new (pending review in registration mode
// approval), and whether that agent is pending. In registration mode
// token, invite (the Agentid-Invite header checkRegistrationMode returned)
// must pass the invitation rule above: the transaction that creates an
// agent spends one use of it, so a failed registration spends nothing; an
// already registered key spends nothing either. A key that only a
// vestauth-compat rotation attached (never proven) is not registered: the
// registration, which proves it, creates an agent for it as for a new
// key, and the key leaves the agent that rotated to it
// (store.DB.CreateAgent). A key once revoked, or held by an agent since
// deleted, is refused with 409 key_conflict. Concurrent registrations of
// one key converge on the unique index on kid: the losers roll back (no
// orphan agent) and find the winner's row.
func (s *Server) registerKey(ctx context.Context, pk signer.PublicKey, invite string) (uid string, isNew, pending bool, err error) {
	if s.cfg.Registration != RegistrationToken {
		invite = ""
	}
	pending = s.cfg.Registration == RegistrationApproval
	for attempt := 0; attempt < 4; attempt++ {
		existing, err := s.db.Key(ctx, pk.JWK.Kid)
		from := "" // the agent an unproven key leaves (it rotated to the key without proving it)
		switch {
		case err == nil && existing.RevokedAt != nil:
			return "", false, false, errKeyRetired(store.ErrKeyRevoked)
		case err == nil && existing.ProvenAt == nil:
			from = existing.AgentUID
		case err == nil:
			isPending, err := s.admitRegistered(ctx, existing.AgentUID, invite)
			switch {
			case errors.Is(err, errAgentGone):
				continue // deleted meanwhile, with its keys: look again
			case err != nil:
				return "", false, false, err
			}
			return existing.AgentUID, false, isPending, nil
		case !errors.Is(err, store.ErrNoSuchKey):
			return "", false, false, dbUnavailable(err)
		}
		uid, err := signer.NewUID(nil)
		if err != nil {
			return "", false, false, err
		}
		err = s.db.CreateAgent(store.WithActor(ctx, actorAgent(uid)), store.NewAgent{UID: uid, Kid: pk.JWK.Kid, JWK: pk.JWK.MarshalPublic(),
			Now: s.cfg.Now().UTC(), Invite: invite, ClaimFrom: from, Pending: pending})
		if from != "" {
			s.forgetDirectory(from) // even on error: a failed commit may have committed
		}
		switch {
		case err == nil:
			return uid, true, pending, nil
		case errors.Is(err, store.ErrInviteRefused):
			return "", false, false, errInviteRefused
		case errors.Is(err, store.ErrKeyRetired):
			return "", false, false, errKeyRetired(err)
		case !errors.Is(err, store.ErrKeyRegistered) && !errors.Is(err, store.ErrKeyChanged):
			return "", false, false, dbUnavailable(err)
		}
		// Lost a race on the kid (or, astronomically unlikely, on the uid),
		// or the unproven key changed meanwhile: look again.
	}
	return "", false, false, dbUnavailable(errors.New("refserver: registration kept conflicting"))
}

// errKeyRetired refuses a registration of, or a rotation to, a key that
// was revoked, rotated away or its agent deleted (cause): such a key never
// becomes good again.
func errKeyRetired(cause error) error {
	return &middleware.Error{Code: CodeKeyConflict,
		Message: "this key was revoked and cannot be registered again; generate a new key", Err: cause}
}

// errAgentGone marks a registration that found its key's agent deleted
// between reading the key and the agent.
var errAgentGone = errors.New("refserver: the key's agent was deleted meanwhile")

// admitRegistered decides a registration of a key the agent uid already
// holds, and reports whether the agent is pending review (the answer says
// so): in registration mode token, invite must pass the invitation rule
// (store.DB.AdmitInvite); an agent its operator rejected is refused with
// 403 agent_rejected and the operator's reason (the request proved
// possession of the agent's key), one disabled with 403 forbidden;
// errAgentGone when uid no longer exists.
func (s *Server) admitRegistered(ctx context.Context, uid, invite string) (pending bool, err error) {
	agent, err := s.db.Agent(ctx, uid)
	if errors.Is(err, store.ErrNoSuchAgent) {
		return false, errAgentGone
	}
	if err != nil {
		return false, dbUnavailable(err)
	}
	if s.cfg.Registration == RegistrationToken {
		if err := s.db.AdmitInvite(ctx, invite, agent, s.cfg.Now()); err != nil {
			if errors.Is(err, store.ErrInviteRefused) {
				return false, errInviteRefused
			}
			return false, dbUnavailable(err)
		}
	}
	switch {
	case agent.Review == store.ReviewRejected:
		return false, errRejected(uid, agent.ReviewReason)
	case agent.DisabledAt != nil:
		return false, errDisabled(uid)
	}
	return agent.Review == store.ReviewPending, nil
}

// actorAgent names the agent uid as the actor of a change it signed.
func actorAgent(uid string) string { return "agent:" + uid }
