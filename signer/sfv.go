package signer

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/dunglas/httpsfv"
)

// This file holds the structured-field values (RFC 8941) of the three fields
// parsed on every signed request — Signature-Input, Signature and
// Signature-Agent — and a strict fast path that parses the shapes real
// signers send without httpsfv's maps and interfaces. The fast path either
// answers exactly what httpsfv would (FuzzFastPathAgrees checks that on
// every input it accepts) or declines, and the caller then parses with
// httpsfv, the reference. It declines anything unusual: string escapes,
// decimals, dates, display strings, duplicate keys, separators other than
// optional whitespace around commas.

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

// fromHTTPSFV converts a bare item parsed by httpsfv.
func fromHTTPSFV(v any) (bareItem, bool) {
	switch v := v.(type) {
	case string:
		return bareItem{kind: kindString, s: v}, true
	case httpsfv.Token:
		return bareItem{kind: kindToken, s: string(v)}, true
	case int64:
		return bareItem{kind: kindInteger, n: v}, true
	case bool:
		return bareItem{kind: kindBoolean, t: v}, true
	case []byte:
		return bytesItem(bytes.Clone(v)), true
	}
	s, err := httpsfv.Marshal(httpsfv.Item{Value: v, Params: httpsfv.NewParams()})
	if err != nil {
		return bareItem{}, false
	}
	return bareItem{kind: kindOther, s: s}, true
}

// paramsFromHTTPSFV converts httpsfv parameters, in order.
func paramsFromHTTPSFV(p *httpsfv.Params) ([]param, bool) {
	if p == nil || len(p.Names()) == 0 {
		return nil, true
	}
	out := make([]param, 0, len(p.Names()))
	for _, k := range p.Names() {
		v, _ := p.Get(k)
		bi, ok := fromHTTPSFV(v)
		if !ok {
			return nil, false
		}
		out = append(out, param{key: k, val: bi})
	}
	return out, true
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

// fastScanner reads one field value. Every method either advances past what
// it parsed and reports true, or reports false: the fast path then declines
// and the caller falls back to httpsfv.
type fastScanner struct {
	s string
	i int
	// ps and its are arenas: the parameters and inner-list items of every
	// member are cut from them (with their capacity capped), so a field
	// costs a few allocations however many members and parameters it has.
	ps  []param
	its []sfItem
}

func (p *fastScanner) eof() bool { return p.i >= len(p.s) }

func (p *fastScanner) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// skipSP skips spaces (between inner-list items and after ';').
func (p *fastScanner) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

// skipOWS skips spaces and tabs (around dictionary commas).
func (p *fastScanner) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// key parses a dictionary or parameter key.
func (p *fastScanner) key() (string, bool) {
	start := p.i
	if p.eof() {
		return "", false
	}
	if c := p.s[p.i]; !(c >= 'a' && c <= 'z' || c == '*') {
		return "", false
	}
	p.i++
	for p.i < len(p.s) && isKeyChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i], true
}

// str parses an sf-string without escapes (a backslash declines).
func (p *fastScanner) str() (string, bool) {
	if p.peek() != '"' {
		return "", false
	}
	rest := p.s[p.i+1:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return "", false
	}
	v := rest[:j]
	for i := 0; i < len(v); i++ {
		if !plainStringChars[v[i]] {
			return "", false
		}
	}
	p.i += j + 2
	return v, true
}

// plainStringChars marks the characters an sf-string holds without an
// escape: printable ASCII but the quote and the backslash.
var plainStringChars = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// bare parses a string, token, integer, boolean or byte-sequence bare
// item. Decimals, dates and display strings decline.
func (p *fastScanner) bare() (bareItem, bool) {
	c := p.peek()
	switch {
	case c == ':':
		b, ok := p.bytes(nil)
		return bytesItem(b), ok
	case c == '"':
		s, ok := p.str()
		return bareItem{kind: kindString, s: s}, ok
	case c == '-' || c >= '0' && c <= '9':
		return p.integer()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			v := p.s[p.i+1] == '1'
			p.i += 2
			return bareItem{kind: kindBoolean, t: v}, true
		}
		return bareItem{}, false
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		start := p.i
		p.i++
		for p.i < len(p.s) && isTokenChar(p.s[p.i]) {
			p.i++
		}
		return bareItem{kind: kindToken, s: p.s[start:p.i]}, true
	}
	return bareItem{}, false
}

// integer parses an sf-integer of at most 15 digits; a decimal point declines.
func (p *fastScanner) integer() (bareItem, bool) {
	neg := false
	if p.peek() == '-' {
		neg = true
		p.i++
	}
	start := p.i
	var n int64
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		if p.i-start == 15 {
			return bareItem{}, false
		}
		n = n*10 + int64(p.s[p.i]-'0')
		p.i++
	}
	if p.i == start || p.peek() == '.' {
		return bareItem{}, false
	}
	if neg {
		n = -n
	}
	return bareItem{kind: kindInteger, n: n}, true
}

// bytes parses an sf-binary into dst (reused when large enough). The
// base64 text is decoded in place from the field value: Decode only reads
// its source, so viewing the string's bytes without a copy is safe.
func (p *fastScanner) bytes(dst []byte) ([]byte, bool) {
	if p.peek() != ':' {
		return nil, false
	}
	rest := p.s[p.i+1:]
	j := strings.IndexByte(rest, ':')
	// base64's decoder skips CR and LF, which httpsfv refuses: decline them.
	if j < 0 || strings.ContainsAny(rest[:j], "\r\n") {
		return nil, false
	}
	enc := rest[:j]
	n := base64.StdEncoding.DecodedLen(len(enc))
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	m, err := base64.StdEncoding.Decode(dst[:n], unsafe.Slice(unsafe.StringData(enc), len(enc)))
	if err != nil {
		return nil, false
	}
	p.i += j + 2
	return dst[:m], true
}

// params parses parameters. Duplicate keys decline (httpsfv keeps the
// last value in the first position; real signers never repeat one).
func (p *fastScanner) params() ([]param, bool) {
	if p.peek() != ';' {
		return nil, true
	}
	if p.ps == nil {
		p.ps = make([]param, 0, strings.Count(p.s[p.i:], ";"))
	}
	start := len(p.ps)
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		k, ok := p.key()
		if !ok {
			return nil, false
		}
		for _, q := range p.ps[start:] {
			if q.key == k {
				return nil, false
			}
		}
		v := bareItem{kind: kindBoolean, t: true}
		if p.peek() == '=' {
			p.i++
			if v, ok = p.bare(); !ok {
				return nil, false
			}
		}
		p.ps = append(p.ps, param{key: k, val: v})
	}
	return p.ps[start:len(p.ps):len(p.ps)], true
}

// next moves past the separator after a dictionary member. It reports
// done at the end of the field and false on anything but OWS "," OWS.
func (p *fastScanner) next() (done, ok bool) {
	p.skipOWS()
	if p.eof() {
		return true, true
	}
	if p.s[p.i] != ',' {
		return false, false
	}
	p.i++
	p.skipOWS()
	return false, !p.eof()
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

// parseStatus is the outcome of the fast path.
type parseStatus uint8

const (
	parsed   parseStatus = iota
	declined             // not a shape the fast path handles: ask httpsfv
	tooMany              // more than the allowed number of members
)

// parseDictFast parses a dictionary, appending its members to out (a
// buffer the caller may keep on its stack). With maxMembers > 0 it stops and
// reports tooMany as soon as the field has more members than that.
func parseDictFast(s string, maxMembers int, out []member) ([]member, parseStatus) {
	p := fastScanner{s: s}
	start := len(out)
	p.skipSP()
	for !p.eof() {
		if maxMembers > 0 && len(out)-start == maxMembers {
			return nil, tooMany
		}
		k, ok := p.key()
		if !ok {
			return nil, declined
		}
		m := member{key: k}
		switch {
		case p.peek() != '=':
			// A bare key is the boolean true with parameters.
			m.item.val = bareItem{kind: kindBoolean, t: true}
			if m.item.params, ok = p.params(); !ok {
				return nil, declined
			}
		case p.i+1 < len(p.s) && p.s[p.i+1] == '(':
			p.i += 2
			m.inner = true
			if m.items, ok = p.innerItems(); !ok {
				return nil, declined
			}
			if m.params, ok = p.params(); !ok {
				return nil, declined
			}
		default:
			p.i++
			if m.item.val, ok = p.bare(); !ok {
				return nil, declined
			}
			if m.item.params, ok = p.params(); !ok {
				return nil, declined
			}
		}
		out = append(out, m)
		done, ok := p.next()
		if !ok {
			return nil, declined
		}
		if done {
			break
		}
	}
	// A duplicate key declines: httpsfv keeps the last value in the first
	// position.
	if duplicateAt(out[start:], func(m member) string { return m.key }) >= 0 {
		return nil, declined
	}
	return out, parsed
}

// innerItems parses the items of an inner list after its "(" up to and
// including ")".
func (p *fastScanner) innerItems() ([]sfItem, bool) {
	if p.its == nil {
		p.its = make([]sfItem, 0, 4)
	}
	start := len(p.its)
	for {
		p.skipSP()
		if p.peek() == ')' {
			p.i++
			return p.its[start:len(p.its):len(p.its)], true
		}
		v, ok := p.bare()
		if !ok {
			return nil, false
		}
		it := sfItem{val: v}
		if it.params, ok = p.params(); !ok {
			return nil, false
		}
		p.its = append(p.its, it)
		if c := p.peek(); c != ' ' && c != ')' {
			return nil, false
		}
	}
}

// parseItemFast parses a field holding one item (with parameters).
func parseItemFast(s string) (sfItem, bool) {
	p := fastScanner{s: s}
	p.skipSP()
	v, ok := p.bare()
	if !ok {
		return sfItem{}, false
	}
	it := sfItem{val: v}
	if it.params, ok = p.params(); !ok {
		return sfItem{}, false
	}
	p.skipSP()
	return it, p.eof()
}

// parseDict parses a dictionary field, by the fast path when it applies and
// by httpsfv otherwise. maxMembers > 0 bounds the member count (an error
// wrapping errTooManyMembers).
func parseDict(s string, maxMembers int) ([]member, error) {
	return parseDictInto(s, maxMembers, nil)
}

// parseDictInto is parseDict appending to out (for a caller's stack buffer).
func parseDictInto(s string, maxMembers int, out []member) ([]member, error) {
	ms, st := parseDictFast(s, maxMembers, out)
	switch st {
	case parsed:
		return ms, nil
	case tooMany:
		return nil, errTooManyMembers
	}
	d, err := httpsfv.UnmarshalDictionary([]string{s})
	if err != nil {
		return nil, err
	}
	if maxMembers > 0 && len(d.Names()) > maxMembers {
		return nil, errTooManyMembers
	}
	return membersFromHTTPSFV(d)
}

// errTooManyMembers is wrapped by the callers' own limit errors.
var errTooManyMembers = errors.New("too many members")

// membersFromHTTPSFV converts a dictionary parsed by httpsfv.
func membersFromHTTPSFV(d *httpsfv.Dictionary) ([]member, error) {
	out := make([]member, 0, len(d.Names()))
	for _, k := range d.Names() {
		v, _ := d.Get(k)
		m := member{key: k}
		switch v := v.(type) {
		case httpsfv.Item:
			it, ok := itemFromHTTPSFV(v)
			if !ok {
				return nil, fmt.Errorf("member %s does not serialize", k)
			}
			m.item = it
		case httpsfv.InnerList:
			m.inner = true
			for _, x := range v.Items {
				it, ok := itemFromHTTPSFV(x)
				if !ok {
					return nil, fmt.Errorf("member %s does not serialize", k)
				}
				m.items = append(m.items, it)
			}
			ps, ok := paramsFromHTTPSFV(v.Params)
			if !ok {
				return nil, fmt.Errorf("member %s does not serialize", k)
			}
			m.params = ps
		}
		out = append(out, m)
	}
	return out, nil
}

func itemFromHTTPSFV(it httpsfv.Item) (sfItem, bool) {
	v, ok := fromHTTPSFV(it.Value)
	if !ok {
		return sfItem{}, false
	}
	ps, ok := paramsFromHTTPSFV(it.Params)
	return sfItem{val: v, params: ps}, ok
}

// parseItem parses a field holding one item, by the fast path when it
// applies and by httpsfv otherwise.
func parseItem(s string) (sfItem, error) {
	if it, ok := parseItemFast(s); ok {
		return it, nil
	}
	it, err := httpsfv.UnmarshalItem([]string{s})
	if err != nil {
		return sfItem{}, err
	}
	out, ok := itemFromHTTPSFV(it)
	if !ok {
		return sfItem{}, errors.New("item does not serialize")
	}
	return out, nil
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
