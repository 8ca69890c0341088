package refserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"github.com/gorilla/mux"

	"github.com/agentid/agentid/refserver/internal/reqid"
	"github.com/agentid/agentid/refserver/store"
)

// readJSONBody checks the content type and size and reads the body once.
func (s *Server) readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, middleware.Fail(CodeUnsupportedMediaType, "the body must be application/json")
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return nil, middleware.Fail(middleware.CodePayloadTooLarge, "the body is larger than %d bytes", s.cfg.MaxBodyBytes)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, middleware.Fail(middleware.CodePayloadTooLarge, "the body is larger than %d bytes", s.cfg.MaxBodyBytes)
		}
		return nil, &middleware.Error{Code: middleware.CodeInvalidRequest, Message: "the body could not be read", Err: err}
	}
	return body, nil
}

// keyRequest is a body {"public_jwk":{…}} as readKeyBody read and
// decoded it, once.
type keyRequest struct {
	pk   signer.PublicKey
	body []byte // as read, for Content-Digest verification
	// dirSigs is the member "directory_signatures" as sent (a rotation's;
	// nil when absent), decoded by directorySignatures.
	dirSigs json.RawMessage
}

// readKeyBody checks the content type and size, reads the body once,
// decodes {"public_jwk":{…}} (and the rotation's directory_signatures,
// kept as sent) and validates the JWK.
func (s *Server) readKeyBody(w http.ResponseWriter, r *http.Request) (keyRequest, error) {
	body, err := s.readJSONBody(w, r)
	if err != nil {
		return keyRequest{}, err
	}
	var req struct {
		PublicJWK           json.RawMessage `json:"public_jwk"`
		DirectorySignatures json.RawMessage `json:"directory_signatures"`
	}
	// One JSON value and nothing after it but white space.
	if err := json.Unmarshal(body, &req); err != nil {
		return keyRequest{}, middleware.Fail(middleware.CodeInvalidRequest, `the body must be a JSON object {"public_jwk":{…}}`)
	}
	if len(req.PublicJWK) == 0 || bytes.Equal(req.PublicJWK, []byte("null")) {
		return keyRequest{}, middleware.Fail(middleware.CodeInvalidRequest, "public_jwk is required")
	}
	pk, err := signer.ParsePublicJWK(req.PublicJWK)
	if err != nil {
		return keyRequest{}, &middleware.Error{Code: CodeInvalidJWK, Message: middleware.ClientMessage(err), Err: err}
	}
	return keyRequest{pk: pk, body: body, dirSigs: req.DirectorySignatures}, nil
}

// directorySignatures decodes the rotation's optional member
// directory_signatures, refusing as decodeDirectorySignatures does.
func (k *keyRequest) directorySignatures() ([]directorySignatureJSON, error) {
	in, _, err := decodeDirectorySignatures(k.dirSigs)
	return in, err
}

// registerAgent is POST /agents: register the body's public key, proven by a
// signature made with it. An already registered (active) key answers 200
// with its agent and is_new false. In registration mode approval the
// answer says "state":"pending" while the agent waits for an operator.
func (s *Server) registerAgent(w http.ResponseWriter, r *http.Request) error {
	r = reqid.Name(w, r)
	invite, v, err := s.checkRegistrationMode(r, s.verify.register)
	if err != nil {
		return err
	}
	kr, err := s.readKeyBody(w, r)
	if err != nil {
		return err
	}
	resp, err := s.proveAndRegister(r, kr.body, kr.pk, invite, v, nil)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if *resp.IsNew {
		status = http.StatusCreated
	}
	writeKeyResponse(w, status, resp)
	return nil
}

// proveAndRegister verifies that r (whose body the handler read) is
// signed by pk (proof of possession, with verifier v and the optional
// extra check, whose error is a refusal by v too), then registers pk,
// spending invite (see registerKey). POST /agents and the vestauth-compat
// POST /register share it.
func (s *Server) proveAndRegister(r *http.Request, body []byte, pk signer.PublicKey, invite string, v *middleware.Verifier, extra func(middleware.Agent) *middleware.Error) (keyResponse, error) {
	res := v.CheckSigned(s.parse(v, r, body), possessionKey{pk})
	if err := refuse(v, res); err != nil {
		return keyResponse{}, err
	}
	if extra != nil {
		if err := extra(res.Agent); err != nil {
			return keyResponse{}, &refusal{v: v, err: err}
		}
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	uid, isNew, pending, err := s.registerKey(ctx, pk, invite)
	s.keys.forget(pk.JWK.Kid) // even on error: a failed commit may have committed
	if err != nil {
		return keyResponse{}, err
	}
	resp := s.keyResponse(uid, pk.JWK)
	resp.IsNew = &isNew
	if pending {
		resp.State = statePending
	}
	return resp, nil
}

// rotateKeys is PUT /agents/{uid}/keys: sig1 by the agent's current key
// (Signature-Agent naming {uid}), sig2 (tag agentid-key-possession) by the
// new key in the body; then, in one transaction holding the agent row lock,
// the new key is inserted and every other active key revoked.
func (s *Server) rotateKeys(w http.ResponseWriter, r *http.Request) error {
	r = reqid.Name(w, r)
	uid, err := pathUID(r)
	if err != nil {
		return err
	}
	kr, err := s.readKeyBody(w, r)
	if err != nil {
		return err
	}
	// Both signatures are checked on one parse of the signature fields
	// and the body read above.
	a, sr, err := s.checkAgentWrite(r, uid, kr.body, "rotate the keys of")
	if err != nil {
		return err
	}
	proof := s.verify.rotationProof
	if err := refuse(proof, proof.CheckSigned(sr, possessionKey{kr.pk})); err != nil {
		return err
	}
	// The directory after the rotation holds the new key alone; the
	// signatures the agent made over it (if any) are checked now and
	// stored with the rotation.
	in, err := kr.directorySignatures()
	if err != nil {
		return err
	}
	served, err := servedKey(kr.pk)
	if err != nil {
		return err
	}
	sigs, err := s.checkDirectorySignatures(uid, []signer.PublicKey{served}, in)
	if err != nil {
		return err
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	if err := s.rotateAgent(ctx, uid, a.KeyID, kr.pk, true, sigs); err != nil {
		return err
	}
	writeKeyResponse(w, http.StatusOK, s.keyResponse(uid, kr.pk.JWK))
	return nil
}

// pathUID returns the {uid} of r's path (PUT /agents/{uid}/…), or 404
// agent_not_found when it is not an agent uid.
func pathUID(r *http.Request) (string, error) {
	uid := mux.Vars(r)["uid"]
	if !signer.ValidUID(uid) {
		return "", middleware.Fail(CodeAgentNotFound, "%q is not an agent uid (want agent-<24 hex>)", signer.Truncate(uid))
	}
	return uid, nil
}

// checkAgentWrite checks the signature of a write to agent uid's own
// record (PUT /agents/{uid}/keys and /directory-signatures), r's body
// read as body: made with an active key of an agent of this service,
// covering @method, @path and content-digest (verify.agentWrite), and by
// uid itself; another agent is refused with 403 forbidden ("the signing
// agent … may not <action> uid"). It returns the signing agent and the
// parsed signature fields, on which a second signature of the request
// is checked without reading them again.
func (s *Server) checkAgentWrite(r *http.Request, uid string, body []byte, action string) (middleware.Agent, *middleware.Signed, error) {
	v := s.verify.agentWrite
	sr := s.parse(v, r, body)
	res := v.CheckSigned(sr, nil)
	if err := refuse(v, res); err != nil {
		return middleware.Agent{}, nil, err
	}
	if a := res.Agent; a.UID != uid {
		return middleware.Agent{}, nil, middleware.Fail(middleware.CodeForbidden, "the signing agent %s may not %s %s", a.SignatureAgent, action, uid)
	}
	return res.Agent, sr, nil
}

// rotateAgent rotates uid to pk (see rotate), replacing the agent's
// directory signatures with sigs (signatures over the directory holding
// pk alone; nil leaves the directory unsigned), pk proven when the
// request proved possession of it (sig2), and, whatever the outcome (a
// failed commit may still have committed), makes this instance forget what
// it holds of the keys the rotation adds or revokes and of uid's directory:
// cached entries, and lookups in flight, whose answers were read before
// the rotation. PUT /agents/{uid}/keys and the vestauth-compat POST
// /rotate share it.
func (s *Server) rotateAgent(ctx context.Context, uid, signingKid string, pk signer.PublicKey, proven bool, sigs []store.DirectorySignature) error {
	revoked, err := s.rotate(ctx, uid, signingKid, pk, proven, sigs)
	s.keys.forget(append(revoked, pk.JWK.Kid)...)
	s.forgetDirectory(uid)
	return err
}

// forgetDirectory drops this instance's rendered directory of uid and any
// read of it in flight, whose answer was read before a change.
func (s *Server) forgetDirectory(uid string) {
	if s.dirs != nil {
		s.dirs.Remove(uid) // bumps the generation a read in flight caches under
	}
	s.dirGroup.Forget(uid)
}

// rotate inserts pk as uid's key and revokes the others, and replaces
// uid's directory signatures with sigs (see store.DB.Rotate), pk stored
// as proven only when proven is set. It returns the kids it revokes (or
// would have, had the commit failed) with any error, as the answer to the
// request.
func (s *Server) rotate(ctx context.Context, uid, signingKid string, pk signer.PublicKey, proven bool, sigs []store.DirectorySignature) (revoked []string, err error) {
	revoked, err = s.db.Rotate(store.WithActor(ctx, actorAgent(uid)), store.Rotation{UID: uid, SigningKid: signingKid, Kid: pk.JWK.Kid,
		JWK: pk.JWK.MarshalPublic(), Proven: proven, Now: s.cfg.Now().UTC(), Signatures: sigs})
	switch {
	case err == nil:
		return revoked, nil
	case errors.Is(err, store.ErrNoSuchKey):
		return revoked, middleware.Fail(middleware.CodeUnknownKey, "key %q is not a key of %s", signingKid, uid)
	case errors.Is(err, store.ErrKeyRevoked):
		return revoked, middleware.Fail(middleware.CodeRevokedKey, "key %q has been revoked (by a concurrent rotation)", signingKid)
	case errors.Is(err, store.ErrKeyRegistered):
		return revoked, &middleware.Error{Code: CodeKeyConflict,
			Message: "the new key is already registered; generate a new key", Err: store.ErrKeyRegistered}
	case errors.Is(err, store.ErrKeyRetired):
		return revoked, errKeyRetired(err)
	}
	return revoked, agentWriteError(uid, err)
}

// agentWriteError answers a failed write the agent uid signed: 404
// agent_not_found when it is not registered, 403 agent_pending or
// agent_rejected while it is pending review or after its rejection, 403
// forbidden when its operator disabled it, the answer a check within the
// write gave, or 503 for a database failure.
func agentWriteError(uid string, err error) error {
	var me *middleware.Error
	switch {
	case errors.As(err, &me):
		return me
	case errors.Is(err, store.ErrNoSuchAgent):
		return middleware.Fail(CodeAgentNotFound, "agent %s is not registered", uid)
	case errors.Is(err, store.ErrAgentDisabled):
		return errDisabled(uid)
	case errors.Is(err, store.ErrAgentPending):
		return errPending(uid)
	case errors.Is(err, store.ErrAgentRejected):
		return errRejected(uid, "")
	}
	return dbUnavailable(err)
}

// whoami is GET/POST /whoami: the agent that signed the request.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	res := s.verify.agent.Check(r)
	if err := refuse(s.verify.agent, res); err != nil {
		return s.rejectedWhoami(r, err)
	}
	a := res.Agent
	if a.UID == "" { // the DB key source accepts only agent-<hex> origins
		return middleware.Fail(middleware.CodeUntrustedAgent, "the signature agent is not an agent of this service")
	}
	if s.keys.mayBeUnproven(a.KeyID) {
		s.proveKey(r.Context(), a.UID, a.KeyID)
	}
	writeAppended(w, http.StatusOK, func(b []byte) []byte { return appendWhoami(b, s.service, a.UID, a.JWK) })
	return nil
}

// proveKey records that a request signed by uid's key kid verified, which
// proves possession of a key a vestauth-compat rotation attached (a key
// already proven is left as it is), and drops this instance's cached
// entry of kid, so that its next lookup reads it proven. Best effort: a
// database failure leaves the key unproven until the next such request.
func (s *Server) proveKey(ctx context.Context, uid, kid string) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	err := s.db.ProveKey(ctx, uid, kid, s.cfg.Now().UTC())
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "could not record a key's proof of possession", slog.String("uid", uid), slog.String("kid", kid), slog.String("cause", err.Error()))
	}
	s.keys.forget(kid)
}

// errDisabled refuses to act for the agent uid, which an operator has
// disabled: 403 forbidden.
func errDisabled(uid string) *middleware.Error {
	return middleware.Fail(middleware.CodeForbidden, "agent %s has been disabled by the operator of this service", uid)
}
