package signer

import (
	"encoding/base64"
	"strconv"
	"strings"
	"unsafe"
)

// This file holds the structured-field values (RFC 8941) of the three fields
// parsed on every signed request — Signature-Input, Signature and
// Signature-Agent — and their serialization. sfv_parse.go parses them
// (sfv_fastpath.go first, httpsfv when the fast path declines).

// itemKind is the type of a bare item.
type itemKind uint8

const (
	kindString itemKind = iota + 1
	kindToken
	kindInteger
	kindBoolean
	kindBytes
	kindOther // decimal, date, display string: kept serialized
)

// bareItem is a parsed bare item (RFC 8941 §3.3), kept small: a byte
// sequence's decoded bytes are held in s too (see bytesItem).
type bareItem struct {
	kind itemKind
	t    bool   // boolean
	n    int64  // integer
	s    string // string and token value; decoded bytes; the serialization for kindOther
}

// bytesItem makes a byte-sequence item from b, which the item then owns:
// the caller must not modify b afterwards.
func bytesItem(b []byte) bareItem {
	return bareItem{kind: kindBytes, s: unsafe.String(unsafe.SliceData(b), len(b))}
}

// bytes returns the bytes of a byte-sequence item, without a copy. Only the
// caller that consumes the parse result (and drops the item) may keep or
// modify them.
func (v bareItem) bytes() []byte {
	return unsafe.Slice(unsafe.StringData(v.s), len(v.s))
}

// param is one parameter, in order (RFC 8941 §3.1.2).
type param struct {
	key string
	val bareItem
}

// getParam returns the value of key in ps.
func getParam(ps []param, key string) (bareItem, bool) {
	for i := range ps {
		if ps[i].key == key {
			return ps[i].val, true
		}
	}
	return bareItem{}, false
}

// appendBare appends the serialization of v (RFC 8941 §4.1.3.1). It reports
// false for a value that cannot be serialized (a string with a character
// outside printable ASCII, an integer out of range, an invalid token).
func appendBare(b []byte, v bareItem) ([]byte, bool) {
	switch v.kind {
	case kindString:
		b = append(b, '"')
		for i := 0; i < len(v.s); i++ {
			c := v.s[i]
			if c < 0x20 || c > 0x7e {
				return b, false
			}
			if c == '"' || c == '\\' {
				b = append(b, '\\')
			}
			b = append(b, c)
		}
		return append(b, '"'), true
	case kindToken:
		if !validToken(v.s) {
			return b, false
		}
		return append(b, v.s...), true
	case kindInteger:
		if v.n < -999_999_999_999_999 || v.n > 999_999_999_999_999 {
			return b, false
		}
		return strconv.AppendInt(b, v.n, 10), true
	case kindBoolean:
		if v.t {
			return append(b, "?1"...), true
		}
		return append(b, "?0"...), true
	case kindBytes:
		b = append(b, ':')
		b = base64.StdEncoding.AppendEncode(b, v.bytes())
		return append(b, ':'), true
	case kindOther:
		return append(b, v.s...), true
	}
	return b, false
}

// appendParams appends the serialization of ps (RFC 8941 §4.1.1.2).
func appendParams(b []byte, ps []param) ([]byte, bool) {
	for _, p := range ps {
		if !validKey(p.key) {
			return b, false
		}
		b = append(b, ';')
		b = append(b, p.key...)
		if p.val.kind == kindBoolean && p.val.t {
			continue
		}
		b = append(b, '=')
		var ok bool
		if b, ok = appendBare(b, p.val); !ok {
			return b, false
		}
	}
	return b, true
}

// validKey reports whether k is an RFC 8941 key: lcalpha or "*", then
// lcalpha, DIGIT, "_", "-", "." or "*".
func validKey(k string) bool {
	if k == "" || !(k[0] >= 'a' && k[0] <= 'z' || k[0] == '*') {
		return false
	}
	for i := 1; i < len(k); i++ {
		if !isKeyChar(k[i]) {
			return false
		}
	}
	return true
}

func isKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*'
}

// validToken reports whether t is an RFC 8941 token: ALPHA or "*", then
// tchar, ":" or "/".
func validToken(t string) bool {
	if t == "" || !(t[0] >= 'a' && t[0] <= 'z' || t[0] >= 'A' && t[0] <= 'Z' || t[0] == '*') {
		return false
	}
	for i := 1; i < len(t); i++ {
		if !isTokenChar(t[i]) {
			return false
		}
	}
	return true
}

// tokenChars marks tchar (RFC 9110 §5.6.2) plus ":" and "/".
var tokenChars = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~:/" {
		t[c] = true
	}
	return t
}()

func isTokenChar(c byte) bool { return tokenChars[c] }

// IsToken reports whether s is an HTTP token (RFC 9110 §5.6.2: one or more
// tchar), the form of a method or a field name.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !tokenChars[c] || c == ':' || c == '/' {
			return false
		}
	}
	return true
}

// sfItem is an item of an inner list, or a dictionary member's item.
type sfItem struct {
	val    bareItem
	params []param
}

// member is one dictionary member: an item, or an inner list with its
// parameters (RFC 8941 §3.2).
type member struct {
	key    string
	inner  bool     // the value is an inner list
	item   sfItem   // the value when !inner
	items  []sfItem // the inner list when inner
	params []param  // the inner list's parameters
}

// appendMemberValue appends the serialization of m's value (an item or an
// inner list, each with its parameters).
func appendMemberValue(b []byte, m *member) ([]byte, bool) {
	ok := true
	if !m.inner {
		if b, ok = appendBare(b, m.item.val); !ok {
			return b, false
		}
		return appendParams(b, m.item.params)
	}
	b = append(b, '(')
	for i, it := range m.items {
		if i > 0 {
			b = append(b, ' ')
		}
		if b, ok = appendBare(b, it.val); !ok {
			return b, false
		}
		if b, ok = appendParams(b, it.params); !ok {
			return b, false
		}
	}
	b = append(b, ')')
	return appendParams(b, m.params)
}

// joinLines joins a field's lines as RFC 9110 §5.3 combines them.
func joinLines(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	return strings.Join(values, ", ")
}

// fieldLen is the length of the joined field.
func fieldLen(values []string) int {
	n := 0
	for i, v := range values {
		if i > 0 {
			n += 2
		}
		n += len(v)
	}
	return n
}
