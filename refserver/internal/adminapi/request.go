package adminapi

// Reading the admin API's requests (query parameters, JSON bodies,
// reasons) and writing its answers.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// Codes refserver defines (it imports this package, so they are named
// here by value; TestChanges and TestBodies check their statuses).
const (
	codeAgentNotFound        middleware.Code = "agent_not_found"
	codeUnsupportedMediaType middleware.Code = "unsupported_media_type"
)

// The admin API's own codes for what a route names and the database does
// not hold.
var (
	codeKeyNotFound        = middleware.DefineCode("key_not_found", http.StatusNotFound)
	codeInvitationNotFound = middleware.DefineCode("invitation_not_found", http.StatusNotFound)
)

// query returns r's query parameters, each at most once and each one of
// names; anything else is 400 invalid_request naming it.
func query(r *http.Request, names ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, middleware.Fail(middleware.CodeInvalidRequest, "the query is not a valid query string")
	}
	for k, v := range q {
		if !slices.Contains(names, k) {
			return nil, middleware.Fail(middleware.CodeInvalidRequest, "unknown query parameter %q (this route reads: %v)", signer.Truncate(k), names)
		}
		if len(v) > 1 {
			return nil, middleware.Fail(middleware.CodeInvalidRequest, "query parameter %s is given %d times", k, len(v))
		}
	}
	return q, nil
}

// decodeBody reads r's body, at most MaxBodyBytes, into v, a struct: an
// empty body leaves v as it is; any other must be application/json, valid
// UTF-8, and one JSON object with no member v does not have.
func (a *api) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	max := a.cfg.MaxBodyBytes
	if r.ContentLength > max {
		return middleware.Fail(middleware.CodePayloadTooLarge, "the body is larger than %d bytes", max)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return middleware.Fail(middleware.CodePayloadTooLarge, "the body is larger than %d bytes", max)
		}
		return &middleware.Error{Code: middleware.CodeInvalidRequest, Message: "the body could not be read", Err: err}
	}
	if len(body) == 0 {
		return nil
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return middleware.Fail(codeUnsupportedMediaType, "the body must be application/json")
	}
	// The decoder would turn invalid UTF-8 into U+FFFD, silently.
	if !utf8.Valid(body) {
		return middleware.Fail(middleware.CodeInvalidRequest, "the body is not valid UTF-8")
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return middleware.Fail(middleware.CodeInvalidRequest, "the body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return middleware.Fail(middleware.CodeInvalidRequest, "member %s must be of JSON type %s", signer.Truncate(te.Field), jsonType(te.Type.Kind().String()))
		case bytes.HasPrefix([]byte(err.Error()), []byte("json: unknown field ")):
			return middleware.Fail(middleware.CodeInvalidRequest, "the body has an unknown member %s", signer.Truncate(err.Error()[len("json: unknown field "):]))
		}
		return middleware.Fail(middleware.CodeInvalidRequest, "the body is not a valid JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return middleware.Fail(middleware.CodeInvalidRequest, "the body holds more than one JSON value")
	}
	return nil
}

// jsonType names a Go kind as JSON does.
func jsonType(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "struct", "map":
		return "object"
	case "slice", "array":
		return "array"
	}
	return "number"
}

// reasonBody is the body of the routes that change something: why.
type reasonBody struct {
	Reason string `json:"reason"`
}

// checkReason refuses, as 400, what store.CheckReason refuses: a reason
// (or a note) too long, or holding control characters (it is shown in
// listings and terminals).
func checkReason(what, reason string) error {
	if err := store.CheckReason(reason); err != nil {
		return middleware.Fail(middleware.CodeInvalidRequest, "the %s %s", what, strings.TrimPrefix(err.Error(), "store: invalid reason: a reason "))
	}
	return nil
}

// readReason decodes a body {"reason":"…"} (or none) and checks the reason.
func (a *api) readReason(w http.ResponseWriter, r *http.Request) (string, error) {
	var b reasonBody
	if err := a.decodeBody(w, r, &b); err != nil {
		return "", err
	}
	return b.Reason, checkReason("reason", b.Reason)
}

// writeJSON writes v as the JSON answer with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("adminapi: encode answer: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
	return nil
}
