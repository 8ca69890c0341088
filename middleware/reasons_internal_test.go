package middleware

import (
	"net/http"
	"regexp"
	"testing"
)

// allReasons is every reason Code.Reason or a Result can carry.
func allReasons() map[string]bool {
	set := map[string]bool{reasonVerified: true}
	for _, r := range reasons {
		set[r] = true
	}
	for _, s := range []int{400, 403, 404, 409, 429, 500, 503} {
		set[statusReason(s)] = true
	}
	return set
}

// TestReasonsBounded: every code, those DefineCode adds included, has a
// reason from the fixed set, a lowercase token; the set stays small.
func TestReasonsBounded(t *testing.T) {
	set := allReasons()
	if len(set) > 30 {
		t.Errorf("%d reasons; the set is meant to stay small (metric label cardinality)", len(set))
	}
	token := regexp.MustCompile(`^[a-z][a-z_]*$`)
	for r := range set {
		if !token.MatchString(r) {
			t.Errorf("reason %q is not a lowercase token", r)
		}
	}
	for c := range statuses {
		if _, ok := reasons[c]; !ok && (c == CodeMissingSignature || c.Status() == http.StatusUnauthorized) {
			t.Errorf("verification code %s has no entry of its own in the reasons table", c)
		}
		if !set[c.Reason()] {
			t.Errorf("code %s: reason %q is outside the set", c, c.Reason())
		}
	}
	// A code DefineCode adds gets the reason of its status.
	for status, want := range map[int]string{403: "forbidden", 429: "rate_limited", 404: "bad_request", 409: "bad_request", 503: "unavailable"} {
		if got := statusReason(status); got != want {
			t.Errorf("status %d: reason %q, want %q", status, got, want)
		}
	}
	if got := Code("not_defined").Reason(); got != "unavailable" {
		t.Errorf("an undefined code (500): reason %q, want unavailable", got)
	}
}
