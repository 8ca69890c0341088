package adminapi

// Authentication (the operator token of Authorization: Bearer) and
// authorization (the route's scope), before any handler runs. The token is
// never written anywhere: not in an answer, an error or a log line (the
// server logs no header).

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/internal/reqid"
	"github.com/agentid/agentid/refserver/store"
)

// The admin API's error codes.
var (
	codeUnauthorized      = middleware.DefineCode("unauthorized", http.StatusUnauthorized)
	codeInsufficientScope = middleware.DefineCode("insufficient_scope", http.StatusForbidden)
)

// operatorKey is the context key of the authenticated token's info, for
// the handlers that need more than the actor the store reads.
type operatorKey struct{}

// authorize is h, the handler of route (its template), behind the
// operator token check: 401 unauthorized without a well-formed bearer
// token or with one unknown, revoked or expired; 403 insufficient_scope
// when the token lacks scope. Both carry WWW-Authenticate (RFC 6750 §3).
// A request the token authenticates gets its request id (X-Request-Id)
// from then on, 403 included, and the store records the token's use
// under it (at most once a minute per token).
func (a *api) authorize(route, scope string, h func(*api, http.ResponseWriter, *http.Request) error) Handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		token, err := bearer(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			return err
		}
		if token == "" {
			w.Header().Set("WWW-Authenticate", "Bearer")
			return middleware.Fail(codeUnauthorized, "this route needs an operator token: send Authorization: Bearer %s… (idcli server operators create)", store.OperatorTokenPrefix)
		}
		id := reqid.New()
		ctx, cancel := a.dbContext(store.WithRequestID(r.Context(), id))
		info, err := a.cfg.DB.AuthenticateOperator(ctx, token, store.OperatorUse{Method: r.Method, Route: route})
		cancel()
		switch {
		case errors.Is(err, store.ErrOperatorTokenUnknown):
			err = middleware.Fail(codeUnauthorized, "the operator token is not known to this service")
		case errors.Is(err, store.ErrOperatorTokenRevoked):
			err = middleware.Fail(codeUnauthorized, "the operator token was revoked (at %s); ask an operator for a new one", info.RevokedAt.Format("2006-01-02T15:04:05Z"))
		case errors.Is(err, store.ErrOperatorTokenExpired):
			err = middleware.Fail(codeUnauthorized, "the operator token expired (at %s); ask an operator for a new one", info.ExpiresAt.Format("2006-01-02T15:04:05Z"))
		case err != nil:
			return dbUnavailable(err)
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			return err
		}
		w.Header().Set(reqid.Header, id)
		if !info.Allows(scope) {
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="`+scope+`"`)
			return middleware.Fail(codeInsufficientScope, "this route needs the scope %s, which the operator token %s does not hold (it holds %s)",
				scope, info.Name, strings.Join(info.Scopes, ", "))
		}
		// Every change the handler makes names the token as its actor and
		// the request by the id answered in X-Request-Id.
		ctx = store.WithActor(store.WithRequestID(r.Context(), id), store.OperatorActor(info.Name))
		return h(a, w, r.WithContext(context.WithValue(ctx, operatorKey{}, info)))
	}
}

// bearer returns the token of r's Authorization: Bearer, "" when r has
// no Authorization, or a 401 for any other Authorization: several, another
// scheme, or a credential that is not an operator token. The scheme is
// matched without regard to case (RFC 9110 §11.1); the token is taken as
// sent, with no trimming or decoding.
func bearer(r *http.Request) (string, error) {
	vals := r.Header.Values("Authorization")
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", middleware.Fail(codeUnauthorized, "send one Authorization header, not %d", len(vals))
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", middleware.Fail(codeUnauthorized, "the Authorization header must be Bearer %s… (an operator token)", store.OperatorTokenPrefix)
	}
	if !store.ValidOperatorTokenFormat(token) {
		return "", middleware.Fail(codeUnauthorized, "the bearer token is not an operator token (%s followed by 43 base64url characters)", store.OperatorTokenPrefix)
	}
	return token, nil
}

// dbUnavailable is the answer to any database failure: 503 with no detail.
func dbUnavailable(err error) *middleware.Error {
	return &middleware.Error{Code: middleware.CodeDatabaseUnavailable,
		Message: "the database is unavailable; try again later", Err: err}
}
