package refserver

import (
	"net/http"

	"github.com/agentid/agentid/middleware"
)

// The reference server's own error codes, in middleware's one code table
// (the verifier's codes, and generic ones such as invalid_request or
// database_unavailable and misdirected_request, are middleware's; rate_limited is ratelimit's).
var (
	CodeInvalidJWK           = middleware.DefineCode("invalid_jwk", http.StatusBadRequest)
	CodeAgentNotFound        = middleware.DefineCode("agent_not_found", http.StatusNotFound)
	CodeNotFound             = middleware.DefineCode("not_found", http.StatusNotFound)
	CodeKeyConflict          = middleware.DefineCode("key_conflict", http.StatusConflict)
	CodeKeyInUse             = middleware.DefineCode("key_in_use", http.StatusConflict)
	CodeUnsupportedMediaType = middleware.DefineCode("unsupported_media_type", http.StatusUnsupportedMediaType)

	// The refusals of an agent registered in registration mode approval
	// (see review.go): pending an operator's review, or rejected.
	codeAgentPending  = middleware.DefineCode("agent_pending", http.StatusForbidden)
	codeAgentRejected = middleware.DefineCode("agent_rejected", http.StatusForbidden)
)
