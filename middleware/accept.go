package middleware

import (
	"net/http"
	"strings"
)

// Accept negotiation for refusals: whether the client prefers Problem
// Details (RFC 9457) to the JSON error body.

const (
	// problemType is the media type of Problem Details (RFC 9457 §3).
	problemType = "application/problem+json"
	// maxAcceptBytes and maxAcceptRanges bound the work spent reading a
	// client's Accept: what lies beyond is not read. The cost is linear in
	// at most maxAcceptBytes, whatever the field holds.
	maxAcceptBytes  = 4096
	maxAcceptRanges = 64
)

// wantsProblem reports whether r's Accept (RFC 9110 §12.5.1) prefers
// application/problem+json to application/json: the weight each gets
// from its most specific matching media range, problem+json strictly
// higher. No Accept, "*/*", a tie or a field that says nothing about
// either gets the JSON error body, the default. Elements that do not parse
// (a bad media range or weight) are skipped; r may be nil.
func wantsProblem(r *http.Request) bool {
	if r == nil {
		return false
	}
	vals := r.Header["Accept"]
	if len(vals) == 0 {
		return false
	}
	var problem, json weight
	budget, ranges := maxAcceptBytes, 0
	for _, v := range vals {
		if len(v) > budget {
			v = v[:budget]
		}
		budget -= max(len(v), 1) // an empty line counts: the loop is bounded too
		for v != "" && ranges < maxAcceptRanges {
			var elem string
			if i := strings.IndexByte(v, ','); i >= 0 {
				elem, v = v[:i], v[i+1:]
			} else {
				elem, v = v, ""
			}
			typ, sub, q, ok := parseMediaRange(elem)
			if !ok {
				continue
			}
			ranges++
			problem.match(typ, sub, q, "problem+json")
			json.match(typ, sub, q, "json")
		}
		if budget <= 0 || ranges >= maxAcceptRanges {
			break
		}
	}
	return problem.q > json.q
}

// weight is the weight of one media type under an Accept field: that of
// its most specific matching range (specificity 3 for type/subtype, 2 for
// type/*, 1 for */*; 0 when none matched, which means not acceptable).
type weight struct {
	specificity int
	q           int // thousandths
}

// match applies the range typ/sub with weight q to application/subtype.
// Among equally specific ranges the first wins.
func (w *weight) match(typ, sub string, q int, subtype string) {
	s := 0
	switch {
	case typ == "*" && sub == "*":
		s = 1
	case !strings.EqualFold(typ, "application"):
		return
	case sub == "*":
		s = 2
	case strings.EqualFold(sub, subtype):
		s = 3
	default:
		return
	}
	if s > w.specificity {
		w.specificity, w.q = s, q
	}
}

// parseMediaRange splits one Accept element, `type/subtype *( OWS ";" OWS
// parameter ) [ weight ]`, into its type, subtype and weight in
// thousandths (1000 when absent). Parameters other than q are ignored;
// anything after the weight (accept-ext) too.
func parseMediaRange(elem string) (typ, sub string, q int, ok bool) {
	elem = strings.Trim(elem, " \t")
	mr, params, _ := strings.Cut(elem, ";")
	typ, sub, ok = strings.Cut(strings.TrimRight(mr, " \t"), "/")
	if !ok || !isHTTPToken(typ) || !isHTTPToken(sub) || (typ == "*" && sub != "*") {
		return "", "", 0, false
	}
	q = 1000
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		name, val, _ := strings.Cut(strings.Trim(p, " \t"), "=")
		if len(name) == 1 && (name[0] == 'q' || name[0] == 'Q') {
			if q, ok = parseQValue(val); !ok {
				return "", "", 0, false
			}
			break // the weight ends the media range's parameters
		}
	}
	return typ, sub, q, true
}

// parseQValue parses qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
// (RFC 9110 §12.4.2) into thousandths.
func parseQValue(s string) (int, bool) {
	if s == "" || len(s) > 5 || (s[0] != '0' && s[0] != '1') {
		return 0, false
	}
	q := int(s[0]-'0') * 1000
	if len(s) == 1 {
		return q, true
	}
	if s[1] != '.' {
		return 0, false
	}
	scale := 100
	for i := 2; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' || (q == 1000 && c != '0') {
			return 0, false
		}
		q += int(c-'0') * scale
		scale /= 10
	}
	return q, true
}

// isHTTPToken reports whether s is an RFC 9110 token.
func isHTTPToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || !httpTokenChars[c] {
			return false
		}
	}
	return true
}

var httpTokenChars = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
