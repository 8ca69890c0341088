package refserver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver/internal/reqid"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// Bounds of the directory signatures an agent hands over.
const (
	// MaxDirectorySignatures is the most signatures one request may carry
	// (and never more than the directory has keys: one per key).
	MaxDirectorySignatures = 8
	// MaxDirectorySignatureValidity is the longest expires - created a
	// directory signature may have: a signature cannot be taken back before
	// it expires, so a far-future one is refused.
	MaxDirectorySignatureValidity = 31 * 24 * time.Hour
	// directorySignatureSkew is how far in the future created may be.
	directorySignatureSkew = time.Minute
	// maxDirectorySignatureValue bounds the base64 text of one signature
	// value (an RSA-4096 signature is 684 characters).
	maxDirectorySignatureValue = 1024
)

// CodeInvalidDirectorySignature refuses a directory signature an agent
// handed over: it does not parse, does not verify over the directory the
// server will serve, or breaks the profile (tag, keyid, components,
// validity, count).
var CodeInvalidDirectorySignature = middleware.DefineCode("invalid_directory_signature", http.StatusBadRequest)

// directorySignatureJSON is one directory signature in a request body:
// the Signature-Input inner list and the signature value in base64.
type directorySignatureJSON struct {
	Input     string `json:"signature_input"`
	Signature string `json:"signature"`
}

// checkDirectorySignatures checks the directory signatures in of uid's
// directory as it will be served with keys, each against that directory
// (rendered once, its body hashed once) and the agent host, and returns
// them as rows to store. Every refusal is 400 invalid_directory_signature
// naming the entry; nothing is stored unless all pass. The work is
// bounded: at most MaxDirectorySignatures entries of bounded size, one
// verification each.
func (s *Server) checkDirectorySignatures(uid string, keys []signer.PublicKey, in []directorySignatureJSON) ([]store.DirectorySignature, error) {
	if len(in) > MaxDirectorySignatures || len(in) > len(keys) {
		return nil, middleware.Fail(CodeInvalidDirectorySignature,
			"%d directory signatures for a directory of %d keys: at most one per key (and %d in all)", len(in), len(keys), MaxDirectorySignatures)
	}
	if len(in) == 0 {
		return nil, nil
	}
	authority := uid + "." + s.service.Host
	dir := newDirEntry(keys)
	now := s.cfg.Now()
	rows := make([]store.DirectorySignature, 0, len(in))
	seen := make(map[string]bool, len(in))
	for i, d := range in {
		fail := func(format string, args ...any) error {
			return middleware.Fail(CodeInvalidDirectorySignature, "directory_signatures[%d]: "+format, append([]any{i}, args...)...)
		}
		if len(d.Signature) > maxDirectorySignatureValue {
			return nil, fail("the signature is %d characters, more than %d", len(d.Signature), maxDirectorySignatureValue)
		}
		value, err := base64.StdEncoding.DecodeString(d.Signature)
		if err != nil || len(value) == 0 {
			return nil, fail("signature is not base64")
		}
		sig, err := signer.ParseDirectorySignature(signer.DirectorySignature{Input: d.Input, Value: value})
		if err != nil {
			return nil, fail("signature_input: %s", middleware.ClientMessage(err))
		}
		p := sig.Params
		switch {
		case p.Tag != signer.DirectoryTag:
			return nil, fail("tag %q, want %q", signer.Truncate(p.Tag), signer.DirectoryTag)
		case !coversExactly(&sig, signer.DirectoryComponents):
			return nil, fail("covers %s, want exactly %s", componentList(&sig), strings.Join(signer.DirectoryComponents, " "))
		case !p.HasCreated || !p.HasExpires:
			return nil, fail("created and expires are required")
		}
		pk, ok := findThumbprint(keys, p.KeyID)
		if !ok {
			return nil, fail("keyid %q is not the thumbprint of a key of the directory", signer.Truncate(p.KeyID))
		}
		if seen[pk.Thumbprint] {
			return nil, fail("a second signature by key %s: one per key", pk.Thumbprint)
		}
		seen[pk.Thumbprint] = true
		created, expires := time.Unix(p.Created, 0), time.Unix(p.Expires, 0)
		switch {
		case !expires.After(created):
			return nil, fail("expires is not after created")
		case expires.Sub(created) > MaxDirectorySignatureValidity:
			return nil, fail("valid for %v, more than %v", expires.Sub(created), MaxDirectorySignatureValidity)
		case created.After(now.Add(directorySignatureSkew)):
			return nil, fail("created at %s, in the future", created.UTC().Format(time.RFC3339))
		case !expires.After(now):
			return nil, fail("expired at %s", expires.UTC().Format(time.RFC3339))
		}
		if err := signer.VerifyDirectoryDigest(&sig, pk, s.service.Scheme, authority, dir.digest); err != nil {
			return nil, fail("does not verify with key %s over the directory of %s as served: %s", pk.Thumbprint, authority, middleware.ClientMessage(err))
		}
		input, err := sig.SignatureParams()
		if err != nil {
			return nil, fail("%s", middleware.ClientMessage(err))
		}
		rows = append(rows, store.DirectorySignature{AgentUID: uid, Kid: pk.Thumbprint, BodyDigest: dir.sum[:],
			Input: input, Value: value, CreatedAt: created.UTC(), ExpiresAt: expires.UTC()})
	}
	return rows, nil
}

// coversExactly reports whether sig covers the components ids, each once,
// in any order, and nothing else.
func coversExactly(sig *signer.Signature, ids []string) bool {
	if len(sig.Components) != len(ids) {
		return false
	}
	for _, id := range ids {
		if !sig.Covers(id) {
			return false
		}
	}
	return true
}

func componentList(sig *signer.Signature) string {
	ids := make([]string, len(sig.Components))
	for i, c := range sig.Components {
		ids[i] = c.ID()
	}
	return signer.Truncate("(" + strings.Join(ids, " ") + ")")
}

func findThumbprint(keys []signer.PublicKey, tp string) (signer.PublicKey, bool) {
	for _, k := range keys {
		if k.Thumbprint == tp {
			return k, true
		}
	}
	return signer.PublicKey{}, false
}

// servedSignatures are the directory signatures served with one body, as
// header values, and the earliest expiry among them.
type servedSignatures struct {
	input, signature string
	expires          time.Time // the earliest expires of the set
	etag             string
}

// headers renders rows (unexpired signatures of d's body) as the
// Signature-Input and Signature fields of the directory response, one
// member per signature labelled binding0, binding1…, and the ETag of the
// body with them (a new set of signatures is a new representation): the
// SHA-256 of the body, each input and each value, the body's part resumed
// from d rather than read again.
func (d *dirEntry) headers(rows []store.DirectorySignature) servedSignatures {
	var in, sv strings.Builder
	var out servedSignatures
	h := d.hashAfterBody()
	for i, r := range rows {
		if i > 0 {
			in.WriteString(", ")
			sv.WriteString(", ")
		}
		label := fmt.Sprintf("binding%d", i)
		in.WriteString(label + "=" + r.Input)
		sv.WriteString(label + "=:" + base64.StdEncoding.EncodeToString(r.Value) + ":")
		if out.expires.IsZero() || r.ExpiresAt.Before(out.expires) {
			out.expires = r.ExpiresAt
		}
		h.Write([]byte(r.Input))
		h.Write(r.Value)
	}
	out.input, out.signature = in.String(), sv.String()
	out.etag = etagOf(h.Sum(nil))
	return out
}

// errDirectorySignaturesShape refuses a body whose directory_signatures
// (or the body itself) does not decode.
var errDirectorySignaturesShape = middleware.Fail(middleware.CodeInvalidRequest,
	`directory_signatures must be a list of {"signature_input":"(…);…","signature":"<base64>"}`)

// decodeDirectorySignatures decodes raw, the optional member
// "directory_signatures" of a JSON request body as sent (nil when the
// body has none); present reports whether the body has it (an empty list
// included; null is none).
func decodeDirectorySignatures(raw json.RawMessage) (in []directorySignatureJSON, present bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, false, errDirectorySignaturesShape
	}
	return in, true, nil
}

// servedKey is pk as the directory serves it once stored: its public JWK
// written and read back as the database holds it, so that a signature is
// checked against the exact body the server will send.
func servedKey(pk signer.PublicKey) (signer.PublicKey, error) {
	return storedKey(store.PublicJWK{Kid: pk.JWK.Kid, JWK: store.JSON(pk.JWK.MarshalPublic())})
}

// directorySignaturesResponse is the answer of PUT
// /agents/{uid}/directory-signatures.
type directorySignaturesResponse struct {
	UID          string                    `json:"uid"`
	WellKnownURL string                    `json:"well_known_url"`
	Signatures   []directorySignatureState `json:"directory_signatures"`
}

type directorySignatureState struct {
	KeyID     string    `json:"keyid"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// refreshDirectorySignatures is PUT /agents/{uid}/directory-signatures:
// the agent (signed as for a rotation: Signature-Agent naming {uid},
// covering content-digest) replaces the signatures served with its key
// directory. In one transaction holding the agent row lock, the
// directory is rendered as it will be served, every signature is checked
// against it, and the stored set is replaced (an empty list leaves the
// directory unsigned).
func (s *Server) refreshDirectorySignatures(w http.ResponseWriter, r *http.Request) error {
	r = reqid.Name(w, r)
	uid, err := pathUID(r)
	if err != nil {
		return err
	}
	body, err := s.readJSONBody(w, r)
	if err != nil {
		return err
	}
	var req struct {
		DirectorySignatures json.RawMessage `json:"directory_signatures"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return errDirectorySignaturesShape
	}
	in, present, err := decodeDirectorySignatures(req.DirectorySignatures)
	if err != nil {
		return err
	}
	if !present {
		return middleware.Fail(middleware.CodeInvalidRequest, `the body must be {"directory_signatures":[…]}`)
	}
	if _, _, err := s.checkAgentWrite(r, uid, body, "sign the directory of"); err != nil {
		return err
	}
	ctx, cancel := s.dbContext(r.Context())
	defer cancel()
	rows, err := s.db.ReplaceDirectorySignatures(store.WithActor(ctx, actorAgent(uid)), uid, func(stored []store.PublicJWK) ([]store.DirectorySignature, error) {
		keys, err := storedKeys(stored)
		if err != nil {
			return nil, err
		}
		return s.checkDirectorySignatures(uid, keys, in)
	})
	s.forgetDirectory(uid)
	if err != nil {
		return agentWriteError(uid, err)
	}
	out := directorySignaturesResponse{UID: uid, WellKnownURL: s.WellKnownURL(uid), Signatures: []directorySignatureState{}}
	for _, row := range rows {
		out.Signatures = append(out.Signatures, directorySignatureState{KeyID: row.Kid, CreatedAt: row.CreatedAt, ExpiresAt: row.ExpiresAt})
	}
	return writeJSON(w, http.StatusOK, out)
}
