package refserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"gorm.io/gorm"
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
// (Agent.InviteTokenID); one that answers for a registered key spends
// none. Modes open and closed read no token.

// errInviteRefused answers a registration whose invitation token is not
// good (unknown, used up, expired or revoked: the client is not told which).
var errInviteRefused = middleware.Fail(middleware.CodeForbidden,
	"registration on this service needs an invitation token, and the one in %s is not valid (unknown, used up, expired or revoked); ask the operator for a new one", signer.InviteHeader)

// inviteUsable reports whether the invitation token t is neither revoked
// nor expired at now.
func inviteUsable(t InviteToken, now time.Time) bool {
	return t.RevokedAt == nil && (t.ExpiresAt == nil || t.ExpiresAt.After(now))
}

// findInvite returns the invitation token row of token, or
// errInviteRefused when none has its digest.
func findInvite(db *gorm.DB, token string) (InviteToken, error) {
	var row InviteToken
	if err := db.Where("hash = ?", inviteHash(token)).Take(&row).Error; err != nil {
		if isNotFound(err) {
			return InviteToken{}, errInviteRefused
		}
		return InviteToken{}, err
	}
	return row, nil
}

// spendInvite spends one use of token within tx (the transaction that
// creates the agent, so a failed registration spends nothing) and returns
// its id, or errInviteRefused when it is unknown, used up, expired or
// revoked. The update re-checks the use left, so concurrent registrations
// never spend more uses than the token has.
func spendInvite(tx *gorm.DB, token string, now time.Time) (uint64, error) {
	row, err := findInvite(tx, token)
	if err != nil {
		return 0, err
	}
	if !inviteUsable(row, now) || row.UsesLeft <= 0 {
		return 0, errInviteRefused
	}
	res := tx.Model(&InviteToken{}).
		Where("id = ? AND uses_left > 0 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)", row.ID, now.UTC()).
		Updates(map[string]any{"uses_left": gorm.Expr("uses_left - 1"), "used": gorm.Expr("used + 1")})
	if res.Error != nil {
		return 0, res.Error
	}
	if res.RowsAffected == 0 {
		return 0, errInviteRefused
	}
	return row.ID, nil
}

// admitInvite checks token for a registration of a key already held by
// agent, which spends nothing: the token must be usable and have a use
// left, or be the one agent was created with.
func admitInvite(db *gorm.DB, token string, agent Agent, now time.Time) error {
	row, err := findInvite(db, token)
	if err != nil {
		return err
	}
	own := agent.InviteTokenID != nil && *agent.InviteTokenID == row.ID
	if !inviteUsable(row, now) || (row.UsesLeft <= 0 && !own) {
		return errInviteRefused
	}
	return nil
}

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
	case "", RegistrationOpen, RegistrationClosed, RegistrationToken:
		return nil
	}
	return fmt.Errorf("refserver: registration mode %q: want %s, %s or %s", mode, RegistrationOpen, RegistrationClosed, RegistrationToken)
}

// registerKey returns the agent holding pk, creating agent and key in one
// transaction when the key is new. In registration mode token, invite
// (the Agentid-Invite header checkRegistrationMode returned) must pass the
// invitation rule above: the transaction that creates an agent spends one
// use of it, so a failed registration spends nothing; an already
// registered key spends nothing either. A key that only a vestauth-compat
// rotation attached (never proven) is not registered: the registration,
// which proves it, creates an agent for it as for a new key, and the key
// leaves the agent that rotated to it (claimKey). Concurrent registrations
// of one key converge on the unique index on kid: the losers roll back (no
// orphan agent) and find the winner's row.
func (s *Server) registerKey(ctx context.Context, pk signer.PublicKey, invite string) (uid string, isNew bool, err error) {
	db := s.db.WithContext(ctx)
	for attempt := 0; attempt < 4; attempt++ {
		var existing PublicJWK
		err := db.Where("kid = ?", pk.JWK.Kid).Take(&existing).Error
		from := "" // the agent an unproven key leaves (it rotated to the key without proving it)
		switch {
		case err == nil && existing.RevokedAt != nil:
			return "", false, middleware.Fail(CodeKeyConflict, "this key was revoked and cannot be registered again; generate a new key")
		case err == nil && existing.ProvenAt == nil:
			from = existing.AgentUID
		case err == nil:
			switch err := s.admitRegistered(db, existing.AgentUID, invite); {
			case errors.Is(err, errAgentGone):
				continue // deleted meanwhile, with its keys: look again
			case err != nil:
				return "", false, err
			}
			return existing.AgentUID, false, nil
		case !isNotFound(err):
			return "", false, dbUnavailable(err)
		}
		uid, err := signer.NewUID(nil)
		if err != nil {
			return "", false, err
		}
		jwk := pk.JWK.MarshalPublic()
		err = db.Transaction(func(tx *gorm.DB) error {
			now := s.cfg.Now().UTC()
			agent := Agent{UID: uid, CreatedAt: now, UpdatedAt: now}
			if s.cfg.Registration == RegistrationToken {
				id, err := spendInvite(tx, invite, now)
				if err != nil {
					return err
				}
				agent.InviteTokenID = &id
			}
			if err := tx.Create(&agent).Error; err != nil {
				return err
			}
			if from != "" {
				return claimKey(tx, pk.JWK.Kid, from, uid, now)
			}
			return tx.Create(&PublicJWK{Kid: pk.JWK.Kid, AgentUID: uid, JWK: JSON(jwk), CreatedAt: now, ProvenAt: &now}).Error
		})
		if from != "" {
			s.forgetDirectory(from) // even on error: a failed commit may have committed
		}
		if err == nil {
			return uid, true, nil
		}
		if me := (*middleware.Error)(nil); errors.As(err, &me) {
			return "", false, me
		}
		if !errors.Is(err, gorm.ErrDuplicatedKey) && !errors.Is(err, errKeyChanged) {
			return "", false, dbUnavailable(err)
		}
		// Lost a race on the kid (or, astronomically unlikely, on the uid),
		// or the unproven key changed meanwhile: look again.
	}
	return "", false, dbUnavailable(errors.New("refserver: registration kept conflicting"))
}

// errKeyChanged marks a claim of an unproven key that found it changed
// (proven, revoked or moved) between reading it and locking its agent.
var errKeyChanged = errors.New("refserver: the key changed meanwhile")

// claimKey moves the key kid, which a vestauth-compat rotation attached to
// agent from and nothing has proven since, to the agent uid that a
// registration proving it creates in tx, now. The key leaves from (whose
// directory no longer lists it, and whose directory signatures, over a
// directory that changed, are dropped) under from's row lock, and the
// change log names it, so every instance drops what it caches of the key
// and of from's directory. It returns errKeyChanged when the key is no
// longer from's unproven active key.
func claimKey(tx *gorm.DB, kid, from, uid string, now time.Time) error {
	if _, err := lockAgent(tx, from); err != nil {
		if errors.Is(err, ErrNoSuchAgent) {
			return errKeyChanged
		}
		return err
	}
	res := tx.Model(&PublicJWK{}).Where("kid = ? AND agent_uid = ? AND revoked_at IS NULL AND proven_at IS NULL", kid, from).
		Updates(map[string]any{"agent_uid": uid, "created_at": now, "proven_at": now})
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return errKeyChanged
	}
	if err := replaceDirectorySignatures(tx, from, nil); err != nil {
		return err
	}
	if err := tx.Model(&Agent{}).Where("uid = ?", from).Update("updated_at", now).Error; err != nil {
		return err
	}
	return logChanges(tx, []KeyChange{{Kid: kid, AgentUID: from, Change: changeClaim, Actor: "registration by the key's holder"}})
}

// errAgentGone marks a registration that found its key's agent deleted
// between reading the key and the agent.
var errAgentGone = errors.New("refserver: the key's agent was deleted meanwhile")

// admitRegistered decides a registration of a key the agent uid already
// holds: in registration mode token, invite must pass the invitation rule
// (admitInvite); an agent its operator disabled is refused with 403
// forbidden; errAgentGone when uid no longer exists.
func (s *Server) admitRegistered(db *gorm.DB, uid, invite string) error {
	var agent Agent
	if err := db.Where("uid = ?", uid).Take(&agent).Error; err != nil {
		if isNotFound(err) {
			return errAgentGone
		}
		return dbUnavailable(err)
	}
	if s.cfg.Registration == RegistrationToken {
		if err := admitInvite(db, invite, agent, s.cfg.Now()); err != nil {
			if me := (*middleware.Error)(nil); errors.As(err, &me) {
				return me
			}
			return dbUnavailable(err)
		}
	}
	if agent.DisabledAt != nil {
		return errDisabled(uid)
	}
	return nil
}
