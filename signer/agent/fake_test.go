package agent_test

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentid/agentid/signer"
)

// fakeService is a hand-written, in-memory stand-in for the reference
// server's agent routes, strict about what the client must send. The end to
// end tests against refserver live in cmd/idcli.
type fakeService struct {
	t        *testing.T
	srv      *httptest.Server
	mu       sync.Mutex
	keys     map[string]signer.PublicKey // uid → current key
	byKid    map[string]string           // kid → uid
	n        int
	requests []*http.Request // clones of every request received
	// hold, if set, runs once a directory refresh has been handled and
	// before its answer is sent (the service is slow to answer).
	hold func()
}

func newFakeService(t *testing.T) *fakeService {
	t.Helper()
	f := &fakeService{t: t, keys: map[string]signer.PublicKey{}, byKid: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /agents", f.register)
	mux.HandleFunc("PUT /agents/{uid}/keys", f.rotate)
	mux.HandleFunc("PUT /agents/{uid}/directory-signatures", f.heldRefresh)
	mux.HandleFunc("/whoami", f.whoami)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Clone(r.Context()))
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeService) URL() string { return f.srv.URL }

// directoryRefreshes counts the directory signature refreshes received.
func (f *fakeService) directoryRefreshes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		if strings.HasSuffix(r.URL.Path, "/directory-signatures") {
			n++
		}
	}
	return n
}

// agentHost is "<scheme>://<uid>.<host:port>" for this service.
func (f *fakeService) origin(uid string) string {
	return strings.Replace(f.srv.URL, "://", "://"+uid+".", 1)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"status": status, "code": code, "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// verifyLabel checks the signature labelled label against pub.
func verifyLabel(r *http.Request, label string, pub ed25519.PublicKey) (signer.Signature, error) {
	sigs, err := signer.ParseSignatures(r.Header.Values("Signature-Input"), r.Header.Values("Signature"))
	if err != nil {
		return signer.Signature{}, err
	}
	for _, s := range sigs {
		if s.Label != label {
			continue
		}
		base, err := s.Base(r)
		if err != nil {
			return signer.Signature{}, err
		}
		if !ed25519.Verify(pub, base, s.Value) {
			return signer.Signature{}, fmt.Errorf("%s does not verify", label)
		}
		return s, nil
	}
	return signer.Signature{}, fmt.Errorf("no signature %s", label)
}

func coversWrite(s signer.Signature) error {
	for _, c := range []string{`"@method"`, `"@authority"`, `"@path"`, `"content-digest"`} {
		if !s.Covers(c) {
			return fmt.Errorf("%s does not cover %s", s.Label, c)
		}
	}
	return nil
}

// readKeyBody reads {"public_jwk":…} and checks Content-Digest.
func readKeyBody(r *http.Request) (signer.PublicKey, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return signer.PublicKey{}, err
	}
	if err := signer.VerifyContentDigest(r.Header.Values("Content-Digest"), body); err != nil {
		return signer.PublicKey{}, err
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return signer.PublicKey{}, fmt.Errorf("content type %q", ct)
	}
	var b struct {
		PublicJWK json.RawMessage `json:"public_jwk"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return signer.PublicKey{}, err
	}
	return signer.ParsePublicJWK(b.PublicJWK)
}

func (f *fakeService) answer(w http.ResponseWriter, status int, uid string, pk signer.PublicKey, isNew *bool) {
	m := map[string]any{
		"uid": uid, "kid": pk.JWK.Kid, "public_jwk": pk.JWK,
		"well_known_url": f.origin(uid) + "/.well-known/http-message-signatures-directory",
	}
	if isNew != nil {
		m["is_new"] = *isNew
	}
	writeJSON(w, status, m)
}

func (f *fakeService) register(w http.ResponseWriter, r *http.Request) {
	pk, err := readKeyBody(r)
	if err != nil {
		writeErr(w, 400, "invalid_jwk", err.Error())
		return
	}
	if r.Header.Get("Signature-Agent") != "" {
		writeErr(w, 400, "invalid_request", "registration must not name a signature agent")
		return
	}
	s, err := verifyLabel(r, "sig1", pk.Key)
	if err == nil {
		err = coversWrite(s)
	}
	if err != nil {
		writeErr(w, 401, "invalid_signature", err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if uid, ok := f.byKid[pk.JWK.Kid]; ok {
		no := false
		f.answer(w, http.StatusOK, uid, pk, &no)
		return
	}
	f.n++
	uid := fmt.Sprintf("agent-%024x", 0xabc000+f.n)
	f.keys[uid], f.byKid[pk.JWK.Kid] = pk, uid
	yes := true
	f.answer(w, http.StatusCreated, uid, pk, &yes)
}

func (f *fakeService) rotate(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, ok := f.keys[uid]
	if !ok {
		writeErr(w, 404, "agent_not_found", "no agent "+uid)
		return
	}
	next, err := readKeyBody(r)
	if err != nil {
		writeErr(w, 400, "invalid_jwk", err.Error())
		return
	}
	sa, err := signer.ParseSignatureAgent(r.Header.Values("Signature-Agent"))
	if err != nil {
		writeErr(w, 401, "invalid_signature_agent", err.Error())
		return
	}
	if o, _ := sa.Member("sig1"); o.Value != f.origin(uid) {
		writeErr(w, 403, "forbidden", fmt.Sprintf("signature agent %q is not %q", o.Value, f.origin(uid)))
		return
	}
	s1, err := verifyLabel(r, "sig1", cur.Key)
	if err == nil {
		err = coversWrite(s1)
	}
	if err == nil && !s1.Covers(`"signature-agent";key="sig1"`) {
		err = fmt.Errorf("sig1 does not cover signature-agent")
	}
	if err != nil {
		writeErr(w, 401, "invalid_signature", err.Error())
		return
	}
	s2, err := verifyLabel(r, "sig2", next.Key)
	if err == nil {
		err = coversWrite(s2)
	}
	if err == nil && s2.Params.Tag != signer.KeyPossessionTag {
		err = fmt.Errorf("sig2 tag %q", s2.Params.Tag)
	}
	if err != nil {
		writeErr(w, 401, "invalid_signature", err.Error())
		return
	}
	delete(f.byKid, cur.JWK.Kid)
	f.keys[uid], f.byKid[next.JWK.Kid] = next, uid
	f.answer(w, http.StatusOK, uid, next, nil)
}

func (f *fakeService) whoami(w http.ResponseWriter, r *http.Request) {
	sa, err := signer.ParseSignatureAgent(r.Header.Values("Signature-Agent"))
	if err != nil {
		writeErr(w, 401, "invalid_signature_agent", err.Error())
		return
	}
	o, _ := sa.Member("sig1")
	uid, _, _ := strings.Cut(strings.TrimPrefix(o.Value, "http://"), ".")
	f.mu.Lock()
	cur, ok := f.keys[uid]
	f.mu.Unlock()
	if !ok || o.Value != f.origin(uid) {
		writeErr(w, 401, "unknown_key", "unknown agent "+o.Value)
		return
	}
	if _, err := verifyLabel(r, "sig1", cur.Key); err != nil {
		writeErr(w, 401, "invalid_signature", err.Error())
		return
	}
	f.answer(w, http.StatusOK, uid, cur, nil)
}

// heldRefresh is refreshDirectory whose answer waits for hold, if set.
func (f *fakeService) heldRefresh(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	hold := f.hold
	f.hold = nil
	f.mu.Unlock()
	if hold == nil {
		f.refreshDirectory(w, r)
		return
	}
	rec := httptest.NewRecorder()
	f.refreshDirectory(rec, r)
	hold()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// holdNextRefresh makes the next directory refresh wait, once handled,
// for release before it answers; answered is closed when it has been
// handled (the service stored the signature).
func (f *fakeService) holdNextRefresh() (answered <-chan struct{}, release func()) {
	a, r := make(chan struct{}), make(chan struct{})
	f.mu.Lock()
	f.hold = func() { close(a); <-r }
	f.mu.Unlock()
	return a, func() { close(r) }
}

// refreshDirectory is PUT /agents/{uid}/directory-signatures: the request
// is signed by the agent's key for the agent, and carries one directory
// signature by that key over the agent's directory as served.
func (f *fakeService) refreshDirectory(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, ok := f.keys[uid]
	if !ok {
		writeErr(w, 404, "agent_not_found", "no agent "+uid)
		return
	}
	if s1, err := verifyLabel(r, "sig1", cur.Key); err != nil || coversWrite(s1) != nil {
		writeErr(w, 401, "invalid_signature", fmt.Sprint(err))
		return
	}
	var body struct {
		Sigs []struct {
			Input     string `json:"signature_input"`
			Signature []byte `json:"signature"`
		} `json:"directory_signatures"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Sigs) != 1 {
		writeErr(w, 400, "invalid_request", fmt.Sprint("want one directory signature: ", err))
		return
	}
	sig, err := signer.ParseDirectorySignature(signer.DirectorySignature{Input: body.Sigs[0].Input, Value: body.Sigs[0].Signature})
	if err == nil {
		host := strings.TrimPrefix(f.origin(uid), "http://")
		cd, _ := signer.ContentDigest(signer.DirectoryBody([]signer.JWK{cur.JWK}), signer.DirectoryDigestAlg)
		err = signer.VerifyDirectoryDigest(&sig, cur, "http", host, cd)
	}
	if err != nil || sig.Params.KeyID != cur.Thumbprint || sig.Params.Tag != signer.DirectoryTag {
		writeErr(w, 400, "invalid_directory_signature", fmt.Sprint(err))
		return
	}
	writeJSON(w, 200, map[string]any{"uid": uid, "well_known_url": f.origin(uid) + signer.DirectoryPath,
		"directory_signatures": []map[string]any{{"keyid": sig.Params.KeyID}}})
}
