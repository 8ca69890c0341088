package refserver

import (
	"errors"
	"net/http"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/internal/reqid"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/gorilla/mux"
)

// vestauth compatibility (Config.VestauthCompat): POST /register and POST
// /rotate in the request and response shapes of vestauth 0.21 clients, on
// the same store, host check (421) and replay store as the native routes.
//
// vestauth signs every request, these two included, with one signature
// covering only @authority; its /register signature carries tag="null" (a
// bug in vestauth: a JavaScript null passed where the default tag was
// meant) and no Signature-Agent, and its /rotate sends no proof of
// possession of the new key. The compat verifiers accept exactly that and
// nothing weaker: created, expires, keyid and nonce stay required, each
// nonce is accepted once per key across every route (the replay key is the
// key's thumbprint and the nonce, so respelling the uncovered
// Signature-Agent does not make a served /whoami request a new one), and
// the window is bounded.

// NullTag is the tag vestauth 0.21 puts on its POST /register signature.
const NullTag = "null"

// CompatRotateMaxWindow bounds expires−created of a POST /rotate signature
// (vestauth signs with exactly 300 s), shortening how long a captured,
// unused signature of the agent's key can be turned into a rotation.
const CompatRotateMaxWindow = 5 * time.Minute

// compatRoutes registers POST /register and POST /rotate on api (the
// service-host subrouter). GET and POST /whoami need nothing extra: the
// native route already verifies vestauth's default-profile signatures.
func (s *Server) compatRoutes(api *mux.Router) {
	s.handle(api, "/register", methods{http.MethodPost: s.limitRegistration(s.compatRegister)})
	s.handle(api, "/rotate", methods{http.MethodPost: s.compatRotate})
}

// readCompatKeyBody is readKeyBody with a missing Content-Type taken as
// application/json (a present one must still be application/json). The
// header is not covered by vestauth's signatures, so setting it changes
// nothing that was signed.
func (s *Server) readCompatKeyBody(w http.ResponseWriter, r *http.Request) (keyRequest, error) {
	if len(r.Header.Values("Content-Type")) == 0 {
		r.Header.Set("Content-Type", "application/json")
	}
	return s.readKeyBody(w, r)
}

// registerAgent is POST /register: vestauth's `agent init`. The body must
// carry public_jwk (no key is ever fetched from Signature-Agent); the
// request must be signed by that key (keyid = its thumbprint) over
// @authority with tag "web-bot-auth" or "null". Registration is POST
// /agents's (registerKey); the answer is always 200 with is_new.
func (s *Server) compatRegister(w http.ResponseWriter, r *http.Request) error {
	r = reqid.Name(w, r)
	if _, _, err := s.checkRegistrationMode(r, s.verify.compatRegister); err != nil {
		return err
	}
	kr, err := s.readCompatKeyBody(w, r)
	if err != nil {
		return err
	}
	resp, err := s.proveAndRegister(r, kr.body, kr.pk, "", s.verify.compatRegister, func(a middleware.Agent) *middleware.Error {
		if a.Tag != signer.DefaultTag && a.Tag != NullTag {
			return middleware.Fail(middleware.CodeInvalidSignatureInput,
				"no signature has tag=%q (or vestauth's tag=%q)", signer.DefaultTag, NullTag)
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeKeyResponse(w, http.StatusOK, resp)
	return nil
}

// rotateKey is POST /rotate: vestauth's `agent rotate`. The request must be
// signed by an active key of the agent its Signature-Agent names
// (<scheme>://<uid>.<service host>), over @authority, within
// CompatRotateMaxWindow; the body's public_jwk then replaces the agent's
// keys exactly as PUT /agents/{uid}/keys does (rotateAgent). There is no
// proof of possession of the new key: vestauth sends none. So that an
// agent cannot take a key another agent holds, a key already registered
// anywhere (another agent's, or this agent's own current or revoked key)
// is refused with 409 key_in_use, and the database is left unchanged; a
// new key is stored unproven (PublicJWK.ProvenAt nil), so that its
// holder's registration takes it to a new agent rather than answering
// with this one (registerKey).
func (s *Server) compatRotate(w http.ResponseWriter, r *http.Request) error {
	r = reqid.Name(w, r)
	kr, err := s.readCompatKeyBody(w, r)
	if err != nil {
		return err
	}
	v := s.verify.compatRotate
	res := v.CheckSigned(s.parse(v, r, kr.body), nil)
	if err := refuse(v, res); err != nil {
		return err
	}
	a := res.Agent
	if a.UID == "" { // the DB key source accepts only agent-<hex> origins
		return middleware.Fail(middleware.CodeUntrustedAgent, "the signature agent is not an agent of this service")
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	if err := s.rotateAgent(ctx, a.UID, a.KeyID, kr.pk, false, nil); err != nil {
		if errors.Is(err, store.ErrKeyRegistered) {
			err = &middleware.Error{Code: CodeKeyInUse,
				Message: "this public key is already registered (to this or another agent); a vestauth rotation cannot prove possession of the new key, so it must be a key never registered before: generate a new key",
				Err:     err}
		}
		return err
	}
	writeKeyResponse(w, http.StatusOK, s.keyResponse(a.UID, kr.pk.JWK))
	return nil
}
