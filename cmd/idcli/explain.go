package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/explain"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// explainRequest is `tool verify --explain`: the key of each signature
// comes from the same key source the verifier uses.
func (tv *toolVerify) explainRequest(ctx context.Context, req *http.Request, keys middleware.KeySource, now time.Time) {
	w := tv.env.Stdout
	if tv.asJSON {
		w = tv.env.Stderr
	}
	e := &explain.Explainer{W: w, Now: now, Key: func(ctx context.Context, sig *signer.Signature) (signer.PublicKey, string, error) {
		set, err := explain.KeySet(req, sig)
		if err != nil {
			return signer.PublicKey{}, "", err
		}
		pk, err := keys.Key(ctx, set, sig.Params.KeyID)
		from := "--jwk"
		if tv.jwk == "" {
			from = set.URL
		}
		return pk, from, err
	}}
	e.Explain(ctx, req)
}

// explainHeaders is `agent headers --explain`: the base the headers sign,
// checked against the agent's own public key, on stderr (stdout carries
// the JSON).
func explainHeaders(env *cliEnv, method, rawURL string, h signer.SignatureHeaders, key signer.PrivateKey, token bool) {
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		return
	}
	req.Header.Set("Signature", h.Signature)
	req.Header.Set("Signature-Input", h.SignatureInput)
	if h.SignatureAgent != "" {
		req.Header.Set("Signature-Agent", h.SignatureAgent)
	}
	from := "AGENT_PRIVATE_JWK"
	if token {
		from = "the PKCS#11 token"
	}
	e := &explain.Explainer{W: env.Stderr, Now: time.Now(), Key: func(context.Context, *signer.Signature) (signer.PublicKey, string, error) {
		return key.Public, from, nil
	}}
	if sa := h.SignatureAgent; sa != "" {
		fmt.Fprintf(env.Stderr, "explain: Signature-Agent: %s (a verifier fetches the key from its directory)\n", sa)
	}
	e.Explain(context.Background(), req)
}
