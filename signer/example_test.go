package signer_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/agentid/agentid/signer"
)

// exampleKey is a fixed key; real agents use signer.GenerateKey(nil).
func exampleKey() signer.PrivateKey {
	return signer.NewPrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize)))
}

func ExampleSign() {
	key := exampleKey()
	req, err := http.NewRequest("GET", "https://example.com/whoami", nil)
	if err != nil {
		log.Fatal(err)
	}
	err = signer.Sign(req, key, signer.Options{
		SignatureAgent: "https://agent-0123.agentid.example",
		// Fixed for a stable example; by default Created is now and the
		// nonce is 64 random bytes.
		Created: time.Unix(1767225600, 0),
		Nonce:   "bm9uY2U",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("Signature-Input:", req.Header.Get("Signature-Input"))
	fmt.Println("Signature:", req.Header.Get("Signature"))
	fmt.Println("Signature-Agent:", req.Header.Get("Signature-Agent"))
	// Output:
	// Signature-Input: sig1=("@authority" "signature-agent";key="sig1");created=1767225600;keyid="UDDReOZl1ipXAfp9wYsm13sDBMK5og--QWdBjzuf6o4";alg="ed25519";expires=1767225900;nonce="bm9uY2U";tag="web-bot-auth"
	// Signature: sig1=:LBF/gE1Dxy7ZXO4om9uwfmyLJ9Ya3j9piQVIq/YSk0f8gYps4UAUvjcZSRwYgWPSUD0xr4IhIRSlkywoB/2eAA==:
	// Signature-Agent: sig1="https://agent-0123.agentid.example"
}

func ExampleHeaders() {
	h, err := signer.Headers("GET", "https://example.com/whoami", exampleKey(), signer.Options{
		SignatureAgent: "https://agent-0123.agentid.example",
		Legacy:         true, // the pre-protocol-01 shape vestauth 0.21.1 verifies
		Created:        time.Unix(1767225600, 0),
		Nonce:          "bm9uY2U",
	})
	if err != nil {
		log.Fatal(err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		log.Fatal(err)
	}
	// Output:
	// {
	//   "Signature": "sig1=:zWUW8T0WXXrMYUz1M3rPqzo9zIdsJm0QyY6Q6QxGfAQ6NT2RdspIXboNiE/r6qfnI0+VdvQIx0Wr9sEaA/BeDQ==:",
	//   "Signature-Input": "sig1=(\"@authority\");created=1767225600;keyid=\"UDDReOZl1ipXAfp9wYsm13sDBMK5og--QWdBjzuf6o4\";alg=\"ed25519\";expires=1767225900;nonce=\"bm9uY2U\";tag=\"web-bot-auth\"",
	//   "Signature-Agent": "sig1=\"https://agent-0123.agentid.example\""
	// }
}

func ExampleTransport() {
	key := exampleKey()
	// A server that checks sig1 with the agent's public key.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sigs, err := signer.ParseSignatures(r.Header.Values("Signature-Input"), r.Header.Values("Signature"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		base, err := sigs[0].Base(r)
		if err != nil || !ed25519.Verify(key.Public.Key, base, sigs[0].Value) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "verified %s by %s over %v", sigs[0].Label, sigs[0].Params.KeyID, sigs[0].Components)
	}))
	defer srv.Close()

	client := &http.Client{Transport: &signer.Transport{
		Key:     key,
		Options: signer.Options{Components: []string{"@method", "@authority", "@path"}},
	}}
	req, err := http.NewRequest("GET", srv.URL+"/whoami", nil)
	if err != nil {
		log.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("caller's request signed:", req.Header.Get("Signature") != "")
	// Output:
	// 200 verified sig1 by UDDReOZl1ipXAfp9wYsm13sDBMK5og--QWdBjzuf6o4 over ["@method" "@authority" "@path"]
	// caller's request signed: false
}
