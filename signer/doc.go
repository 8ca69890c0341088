// Package signer implements the wire format of agentid: keys as JWKs
// (Ed25519 per RFC 8037, RSA-PSS and ECDSA P-256 per RFC 7518; RFC 7638
// thumbprints), HTTP Message Signatures (RFC 9421) with the
// web-bot-auth profile, the Signature, Signature-Input and Signature-Agent
// fields, and Content-Digest (RFC 9530). The one implementation of the
// signature base lives here; signing and verifying both use it.
//
// Sign a request in place, or let a Transport sign every round trip:
//
//	key, _ := signer.GenerateKey(nil)
//	err := signer.Sign(req, key, signer.Options{SignatureAgent: "https://agent-x.example"})
//	client := &http.Client{Transport: &signer.Transport{Key: key}}
//	sigs, _ := signer.ParseSignatures(r.Header.Values("Signature-Input"), r.Header.Values("Signature"))
//	base, _ := sigs[0].Base(r) // then pub.Verify(alg, base, sigs[0].Value)
package signer
