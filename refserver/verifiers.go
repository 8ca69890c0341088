package refserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// verifiers are the server's signature verifiers, one per kind of signed
// request, all built once by New. Each route reads its request's
// signature fields once (middleware.Verifier.Parse) where it checks more
// than one signature or has read the body itself.
type verifiers struct {
	// agent verifies a signature by an active database key of an agent of
	// this server (GET/POST /whoami).
	agent *middleware.Verifier
	// agentWrite is agent covering @method, @path and content-digest too:
	// the first signature of PUT /agents/{uid}/keys.
	agentWrite *middleware.Verifier
	// register verifies the proof of possession of POST /agents: signed,
	// covering the write components, by the key in the body (possessionKey).
	register *middleware.Verifier
	// registerInvite is register also requiring the Agentid-Invite
	// header to be covered (registration mode token).
	registerInvite *middleware.Verifier
	// rotationProof is register with tag agentid-key-possession: the
	// second signature of PUT /agents/{uid}/keys, by the new key.
	rotationProof *middleware.Verifier
	// owner is agent with the key given per request and no outcome hook:
	// /whoami's check that a rejected agent's key signed the request
	// (rejectedWhoami).
	owner *middleware.Verifier
	// compatRegister and compatRotate verify vestauth's POST /register
	// (by the body's key, @authority only, any single tag) and POST
	// /rotate (by the agent's database key, @authority only, within
	// CompatRotateMaxWindow). Nil unless Config.VestauthCompat.
	compatRegister, compatRotate *middleware.Verifier
}

// newVerifiers builds the verifiers from what they all share (base: the
// clock, replay store, logger, body cap and metrics hook).
func newVerifiers(base middleware.Config, keys middleware.KeySource, compat bool) (verifiers, error) {
	writeComponents := []string{"@method", "@path", "content-digest"}

	agent := base
	agent.Keys = keys
	agentWrite := agent
	agentWrite.RequiredComponents = writeComponents

	register := base
	register.Keys = keyInBody
	register.AllowMissingSignatureAgent = true
	register.RequiredComponents = writeComponents
	registerInvite := register
	registerInvite.RequiredComponents = append(append([]string(nil), writeComponents...), inviteComponent)
	rotationProof := register
	rotationProof.Tag = signer.KeyPossessionTag
	owner := base
	owner.Keys = keyInBody
	owner.OnResult = nil

	var err error
	build := func(cfg middleware.Config) *middleware.Verifier {
		if err != nil {
			return nil
		}
		var v *middleware.Verifier
		v, err = middleware.New(cfg)
		return v
	}
	vs := verifiers{
		agent:          build(agent),
		agentWrite:     build(agentWrite),
		register:       build(register),
		registerInvite: build(registerInvite),
		rotationProof:  build(rotationProof),
		owner:          build(owner),
	}
	if compat {
		cr := base
		cr.RequiredComponents = []string{"@authority"}
		cr.Keys = keyInBody
		cr.AllowMissingSignatureAgent = true
		// A single signature with another tag (vestauth's "null") is
		// taken; the handler then admits only "web-bot-auth" and "null".
		cr.AnyTag = true
		vs.compatRegister = build(cr)

		co := base
		co.RequiredComponents = []string{"@authority"}
		co.Keys = keys
		co.MaxWindow = CompatRotateMaxWindow
		vs.compatRotate = build(co)
	}
	return vs, err
}

// keyInBody is the Config.Keys of the proof-of-possession verifiers, whose
// key is given per request (possessionKey): it knows no key.
var keyInBody = middleware.KeySourceFunc(func(context.Context, signer.KeySet, string) (signer.PublicKey, error) {
	return signer.PublicKey{}, errors.New("refserver: the key of a proof of possession is given per request")
})

// possessionKey is the KeySource of a proof of possession: pk, the
// public_jwk of the request body, whose thumbprint the signature's keyid
// must be.
type possessionKey struct{ pk signer.PublicKey }

func (p possessionKey) Key(_ context.Context, _ signer.KeySet, keyID string) (signer.PublicKey, error) {
	if keyID != p.pk.JWK.Kid {
		return signer.PublicKey{}, fmt.Errorf("%w: keyid is not the thumbprint of the public_jwk in the body", signer.ErrUnknownKey)
	}
	return p.pk, nil
}
