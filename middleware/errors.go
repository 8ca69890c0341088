package middleware

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error is an error with the HTTP status and stable code of DESIGN §6. Message
// is shown to the client; Err (if any) is for logs only.
type Error struct {
	Status  int
	Code    string
	Message string
	Err     error
}

// Errorf returns an *Error with a formatted client message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("middleware: %s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("middleware: %s: %s", e.Code, e.Message)
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is lets errors.Is(err, &Error{Code: "x"}) match by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Status == 0 || t.Status == e.Status)
}

// AsError returns err as an *Error; anything else becomes 500 internal with
// no detail for the client.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error", Err: err}
}

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// WriteError writes err as the JSON error body of DESIGN §6:
// {"error":{"status":401,"code":"…","message":"…"}}.
func WriteError(w http.ResponseWriter, err error) {
	e := AsError(err)
	b, _ := json.Marshal(errorBody{Error: errorFields{Status: e.Status, Code: e.Code, Message: e.Message}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	w.Write(append(b, '\n'))
}
