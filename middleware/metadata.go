package middleware

import (
	"net/http"

	"github.com/agentid/agentid/signer"
	"github.com/dunglas/httpsfv"
)

// agentMetadata parses Signed-Agent-Metadata
// (draft-vilgalys-webbotauth-signed-agent-metadata-00) when sig covers it:
// a structured-field dictionary, read with httpsfv. It returns nil when
// the field is not covered (an uncovered field is not the agent's word),
// and only the covered members: all of them when the field is covered
// whole, else those a covered "signed-agent-metadata";key="…" names (a
// member added after signing is not the agent's word either).
func (v *Verifier) agentMetadata(r *http.Request, sig *signer.Signature) (map[string]string, *Error) {
	var keys map[string]bool // the covered members, unless whole
	whole := false
	for _, c := range sig.Components {
		if c.Name != signer.MetadataComponent {
			continue
		}
		if c.Key == "" {
			whole = true
			break
		}
		if keys == nil {
			keys = map[string]bool{}
		}
		keys[c.Key] = true
	}
	if !whole && keys == nil {
		return nil, nil
	}
	if whole {
		keys = nil
	}
	vals := r.Header.Values(signer.MetadataHeader)
	n := 0
	for _, s := range vals {
		n += len(s)
	}
	if n > v.cfg.Limits.MaxFieldBytes {
		return nil, Fail(CodeInvalidRequest, "%s is %d bytes, more than %d", signer.MetadataHeader, n, v.cfg.Limits.MaxFieldBytes)
	}
	d, err := httpsfv.UnmarshalDictionary(vals)
	if err != nil {
		return nil, &Error{Code: CodeInvalidRequest, Message: signer.MetadataHeader + " is not a structured-field dictionary", Err: err}
	}
	names := d.Names()
	md := make(map[string]string, len(names))
	for _, k := range names {
		if keys != nil && !keys[k] {
			continue
		}
		m, _ := d.Get(k)
		if it, ok := m.(httpsfv.Item); ok && len(it.Params.Names()) == 0 {
			switch x := it.Value.(type) {
			case string:
				md[k] = x
				continue
			case httpsfv.Token:
				md[k] = string(x)
				continue
			}
		}
		s, err := httpsfv.Marshal(m)
		if err != nil {
			return nil, &Error{Code: CodeInvalidRequest, Message: signer.MetadataHeader + " member " + k + " cannot be serialized", Err: err}
		}
		md[k] = s
	}
	return md, nil
}
