package signer

import (
	"encoding/base64"
	"strings"
	"unsafe"
)

// This file holds a strict fast path that parses the shapes real signers
// send without httpsfv's maps and interfaces. It either answers exactly
// what httpsfv would (FuzzFastPathAgrees checks that on every input it
// accepts) or declines, and the caller then parses with httpsfv, the
// reference. It declines anything unusual: string escapes, decimals,
// dates, display strings, duplicate keys, separators other than optional
// whitespace around commas.

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
