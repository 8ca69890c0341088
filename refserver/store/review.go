package store

// An operator's review of the agents registered pending (registration
// mode approval). A pending agent's directory lists no key and its
// signatures are refused until an operator approves it; a rejected one
// stays so. A decision is final and is made once: only a pending agent is
// decided, under its row lock; the same decision again changes nothing (a
// retried command) and the other one is refused with ErrNotPending, so of
// two operators deciding at once exactly one decides and the audit trail
// holds one decision. An agent never goes back to pending, and a rejected
// one is not approved later: an operator who reconsiders deletes it, and
// its owner's next registration creates a new, pending agent. Every
// decision writes the change log, so every instance applies it within 1 s.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

var (
	// ErrAgentPending: the agent waits for an operator's review.
	ErrAgentPending = errors.New("store: agent pending review")
	// ErrAgentRejected: an operator rejected the agent.
	ErrAgentRejected = errors.New("store: agent rejected")
	// ErrNotPending: an operator's decision on an agent that is not
	// pending review (never was, or was decided otherwise).
	ErrNotPending = errors.New("store: agent not pending review")
)

// ApproveAgent lets the pending agent uid in, for reason (see
// CheckReason; may be ""), on behalf of the actor in ctx (see WithActor):
// its directory lists its keys and its signatures verify, on every
// instance within 1 s. It returns the agent as it is after the call and
// whether anything changed: false when it already was approved (the
// first reason stays). An agent that was rejected, or never pending, is
// refused with ErrNotPending; an unknown one with ErrNoSuchAgent.
func (d *DB) ApproveAgent(ctx context.Context, uid, reason string) (AgentInfo, bool, error) {
	return d.review(ctx, uid, "", reason)
}

// RejectAgent refuses the pending agent uid for reason, which its owner
// reads (see CheckReason; required), on behalf of the actor in ctx: it
// stays refused, its directory empty. It returns as ApproveAgent does;
// changed is false when it already was rejected (the first reason stays).
// An approved agent is refused with ErrNotPending: disable it instead.
func (d *DB) RejectAgent(ctx context.Context, uid, reason string) (AgentInfo, bool, error) {
	if strings.TrimSpace(reason) == "" {
		return AgentInfo{}, false, fmt.Errorf("%w: a rejection needs a reason (the agent's owner reads it)", ErrInvalidReason)
	}
	return d.review(ctx, uid, ReviewRejected, reason)
}

// review decides the pending agent uid: to is "" (approve) or
// ReviewRejected.
func (d *DB) review(ctx context.Context, uid, to, reason string) (AgentInfo, bool, error) {
	if err := CheckReason(reason); err != nil {
		return AgentInfo{}, false, err
	}
	change, action := ChangeApprove, ActionApprove
	if to == ReviewRejected {
		change, action = ChangeReject, ActionReject
	}
	actor := actorOf(ctx)
	var info AgentInfo
	changed := false
	err := d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		row, err := lockAgent(tx, uid)
		if err != nil {
			return err
		}
		if row.Review != ReviewPending {
			if row.ReviewedAt == nil || row.Review != to {
				return notPending(row)
			}
			info, err = showAgent(tx, uid) // decided so already
			return err
		}
		changed = true
		if err := tx.Model(&Agent{}).Where("uid = ?", uid).
			Updates(map[string]any{"review": to, "review_reason": reason, "reviewed_at": time.Now().UTC()}).Error; err != nil {
			return err
		}
		if info, err = showAgent(tx, uid); err != nil {
			return err
		}
		if err := record(tx, auditEntry{Action: action, AgentUID: uid, Reason: reason}); err != nil {
			return err
		}
		rows := make([]KeyChange, 0, len(info.Keys))
		for _, k := range info.Keys {
			rows = append(rows, KeyChange{Kid: k.Kid, AgentUID: uid, Change: change, Actor: truncActor(actor)})
		}
		if len(rows) == 0 {
			rows = append(rows, KeyChange{AgentUID: uid, Change: change, Actor: truncActor(actor)}) // the directory still changes
		}
		return logChanges(tx, rows) // last: it takes the log's lock until the commit
	})
	return info, changed, err
}

// notPending is the ErrNotPending of a decision on agent a, saying why.
func notPending(a Agent) error {
	switch {
	case a.ReviewedAt == nil:
		return fmt.Errorf("%w: %s was never pending review (it registered without approval)", ErrNotPending, a.UID)
	case a.Review == ReviewRejected:
		return fmt.Errorf("%w: %s was rejected at %s, and a decision is final (delete the agent: its owner's next registration is pending anew)",
			ErrNotPending, a.UID, a.ReviewedAt.UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("%w: %s was approved at %s, and a decision is final (disable the agent instead)",
		ErrNotPending, a.UID, a.ReviewedAt.UTC().Format(time.RFC3339))
}

// reviewRefusal refuses a write the agent a signed while it is pending or
// rejected (nil when it was let in).
func reviewRefusal(a Agent) error {
	switch a.Review {
	case ReviewPending:
		return fmt.Errorf("%w: %s", ErrAgentPending, a.UID)
	case ReviewRejected:
		return fmt.Errorf("%w: %s", ErrAgentRejected, a.UID)
	}
	return nil
}
