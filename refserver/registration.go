package refserver

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/agentid/agentid/middleware"
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
)

// inviteComponent is the Agentid-Invite header as a covered component.
var inviteComponent = strings.ToLower(signer.InviteHeader)

// errInviteRefused answers a registration whose invitation token is not
// good (unknown, used up, expired or revoked: the client is not told which).
var errInviteRefused = middleware.Fail(middleware.CodeForbidden,
	"registration on this service needs an invitation token, and the one in %s is not valid (unknown, used up, expired or revoked); ask the operator for a new one", signer.InviteHeader)

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
