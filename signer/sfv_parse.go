package signer

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dunglas/httpsfv"
)

// This file parses a field: by the fast path when it applies, else by
// httpsfv, whose results are converted to the values of sfv.go.

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
