package signer

import (
	"fmt"
	"slices"
	"strings"
)

// MetadataHeader is the field an agent sends its signed metadata in
// (draft-vilgalys-webbotauth-signed-agent-metadata-00): a structured-field
// dictionary. MetadataComponent is its covered-component name.
const (
	MetadataHeader    = "Signed-Agent-Metadata"
	MetadataComponent = "signed-agent-metadata"
)

// serializeMetadata serializes m as a dictionary of sf-strings, in key
// order.
func serializeMetadata(m map[string]string) (string, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !validKey(k) {
			return "", fmt.Errorf("signer: metadata key %q is not a structured-field key (lowercase letter or '*', then a-z 0-9 _ - . *)", Truncate(k))
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b []byte
	for i, k := range keys {
		if strings.ContainsFunc(m[k], func(r rune) bool { return r < 0x20 || r > 0x7e }) {
			return "", fmt.Errorf("signer: metadata value of %q is not printable ASCII", k)
		}
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, k...)
		b = append(b, '=')
		b, _ = appendBare(b, bareItem{kind: kindString, s: m[k]})
	}
	return string(b), nil
}

// coversAgent reports whether the component list names signature-agent in
// any form.
func coversAgent(names []string) bool {
	for _, n := range names {
		if n == "signature-agent" || strings.HasPrefix(n, `"signature-agent"`) {
			return true
		}
	}
	return false
}
