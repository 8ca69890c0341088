package adminapi

// The invitation token routes: list, create (the token shown once, in
// the answer), revoke.

import (
	"net/http"
	"strconv"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/gorilla/mux"
)

// Bounds of POST /invitations.
const (
	defaultInviteTTL = 7 * 24 * time.Hour
	maxInviteTTL     = 10 * 365 * 24 * time.Hour
	maxInviteUses    = 1_000_000
	maxInviteNote    = 200
)

// listInvitations is GET /invitations: every invitation token, newest
// first (never a token itself).
func (a *api) listInvitations(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	ctx, cancel := a.dbContext(r.Context())
	defer cancel()
	list, err := a.cfg.DB.ListInvites(ctx)
	if err != nil {
		return dbUnavailable(err)
	}
	return writeJSON(w, http.StatusOK, struct {
		Invitations []store.InviteInfo `json:"invitations"`
	}{list})
}

// createInvitation is POST /invitations, body {"note","uses","expires_in"}
// (all optional: "", 1, 604800 s; expires_in 0 for no expiry): 201 with
// the token, shown this once, and the invitation.
func (a *api) createInvitation(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	var b struct {
		Note      string `json:"note"`
		Uses      *int64 `json:"uses"`
		ExpiresIn *int64 `json:"expires_in"`
	}
	if err := a.decodeBody(w, r, &b); err != nil {
		return err
	}
	uses, ttl := int64(1), defaultInviteTTL
	if b.Uses != nil {
		if *b.Uses < 1 || *b.Uses > maxInviteUses {
			return middleware.Fail(middleware.CodeInvalidRequest, "uses %d: want 1 to %d", *b.Uses, maxInviteUses)
		}
		uses = *b.Uses
	}
	if b.ExpiresIn != nil {
		if *b.ExpiresIn < 0 || *b.ExpiresIn > int64(maxInviteTTL/time.Second) {
			return middleware.Fail(middleware.CodeInvalidRequest, "expires_in %d: want 0 (no expiry) to %d seconds", *b.ExpiresIn, int64(maxInviteTTL/time.Second))
		}
		ttl = time.Duration(*b.ExpiresIn) * time.Second
	}
	if len(b.Note) > maxInviteNote {
		return middleware.Fail(middleware.CodeInvalidRequest, "the note is %d bytes, more than %d", len(b.Note), maxInviteNote)
	}
	if err := checkReason("note", b.Note); err != nil {
		return err
	}
	ctx, cancel := a.dbContext(r.Context())
	defer cancel()
	token, info, err := a.cfg.DB.CreateInvite(ctx, b.Note, uses, ttl)
	if err != nil {
		return dbUnavailable(err)
	}
	return writeJSON(w, http.StatusCreated, struct {
		Token      string           `json:"token"`
		Invitation store.InviteInfo `json:"invitation"`
	}{token, info})
}

// revokeInvitation is POST /invitations/{id}/revoke, with no body (or
// {}); an id that is not one as the server writes it (digits, no leading
// zero, at most the largest signed 64-bit integer) is 404.
func (a *api) revokeInvitation(w http.ResponseWriter, r *http.Request) error {
	raw := mux.Vars(r)["id"]
	id, err := strconv.ParseUint(raw, 10, 63)
	if err != nil || id == 0 || strconv.FormatUint(id, 10) != raw {
		return middleware.Fail(codeInvitationNotFound, "%q is not an invitation id (see GET %s/invitations)", signer.Truncate(raw), Prefix)
	}
	if _, err := query(r); err != nil {
		return err
	}
	if err := a.decodeBody(w, r, &struct{}{}); err != nil {
		return err
	}
	ctx, cancel := a.dbContext(r.Context())
	defer cancel()
	info, changed, err := a.cfg.DB.RevokeInvite(ctx, id)
	if err != nil {
		return storeError(err)
	}
	return writeJSON(w, http.StatusOK, struct {
		Invitation store.InviteInfo `json:"invitation"`
		Changed    bool             `json:"changed"`
	}{info, changed})
}
