package agent

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/envfile"
)

// DefaultDirectoryValidity is how long the directory signatures an agent
// makes are valid. The agent refreshes them past half of it (RefreshIfDue).
const DefaultDirectoryValidity = 7 * 24 * time.Hour

// Names of the credential variables recording the agent's last directory
// signature: its created and expires times, in Unix seconds. An agent
// without them (made by vestauth, or before directory signatures) is never
// refreshed on its own.
const (
	EnvDirectorySignedAt    = "AGENT_DIRECTORY_SIGNED_AT"
	EnvDirectorySignedUntil = "AGENT_DIRECTORY_SIGNED_UNTIL"
)

// DirectorySignature is the directory signature the service stored.
type DirectorySignature struct {
	// UID is the agent whose directory is signed.
	UID string
	// WellKnownURL is the agent's key directory URL.
	WellKnownURL string
	// KeyID is the signing key's thumbprint.
	KeyID string
	// Created and Expires bound its validity: past Expires the directory is
	// served unsigned.
	Created, Expires time.Time
}

// directorySignatureJSON is one member of directory_signatures.
type directorySignatureJSON struct {
	Input     string `json:"signature_input"`
	Signature string `json:"signature"`
}

func (c *Client) directoryValidity() time.Duration {
	if c.DirectoryValidity > 0 {
		return c.DirectoryValidity
	}
	return DefaultDirectoryValidity
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// signOwnDirectory signs the key directory of agent uid at svc as the
// service will serve it once key is the agent's only key: the body holds
// key's public JWK as the service stores it, the authority is the agent
// host.
func (c *Client) signOwnDirectory(svc signer.ServiceURL, uid string, key signer.PrivateKey) (directorySignatureJSON, time.Time, time.Time, error) {
	pk, err := signer.ParsePublicJWK(key.Public.JWK.MarshalPublic())
	if err != nil {
		return directorySignatureJSON{}, time.Time{}, time.Time{}, fmt.Errorf("agent: directory signature: %w", err)
	}
	created := c.now().Truncate(time.Second)
	expires := created.Add(c.directoryValidity())
	ds, err := signer.SignDirectory(key, svc.Scheme, uid+"."+svc.Host, signer.DirectoryBody([]signer.JWK{pk.JWK}), created, expires)
	if err != nil {
		return directorySignatureJSON{}, time.Time{}, time.Time{}, fmt.Errorf("agent: directory signature: %w", err)
	}
	return directorySignatureJSON{Input: ds.Input, Signature: base64.StdEncoding.EncodeToString(ds.Value)}, created, expires, nil
}

// RefreshDirectory signs agent uid's key directory with key (its only
// key) and hands the signature to the service at serviceURL: PUT
// {serviceURL}/agents/{uid}/directory-signatures with body
// {"directory_signatures":[…]}, signed by key as a rotation's sig1 is
// (covering @method, @authority, @path, content-digest and
// "signature-agent";key="sig1"). The signature covers "@authority";req
// (the agent host) and the Content-Digest of the directory body, with tag
// http-message-signatures-directory and keyid the key's thumbprint, and is
// valid for DirectoryValidity.
func (c *Client) RefreshDirectory(ctx context.Context, serviceURL, uid string, key signer.PrivateKey) (DirectorySignature, error) {
	svc, err := signer.ParseServiceURL(serviceURL)
	if err != nil {
		return DirectorySignature{}, err
	}
	if err := checkUID(uid); err != nil {
		return DirectorySignature{}, err
	}
	ds, created, expires, err := c.signOwnDirectory(svc, uid, key)
	if err != nil {
		return DirectorySignature{}, err
	}
	body := jsonBody(map[string]any{"directory_signatures": []directorySignatureJSON{ds}})
	req, err := newJSONRequest(ctx, http.MethodPut, svc.String()+"/agents/"+url.PathEscape(uid)+"/directory-signatures", body)
	if err != nil {
		return DirectorySignature{}, err
	}
	if err := c.signAsAgent(req, key, svc, uid); err != nil {
		return DirectorySignature{}, fmt.Errorf("agent: sign directory refresh: %w", err)
	}
	ar, _, err := send(c.HTTPClient, req, http.StatusOK)
	if err != nil {
		return DirectorySignature{}, err
	}
	if ar.UID != uid {
		return DirectorySignature{}, fmt.Errorf("agent: the service answered for uid %s, want %s", ar.UID, uid)
	}
	if len(ar.DirectorySignatures) != 1 || ar.DirectorySignatures[0].KeyID != key.Public.Thumbprint {
		return DirectorySignature{}, fmt.Errorf("agent: the service did not store the directory signature of key %s", key.Public.Thumbprint)
	}
	return DirectorySignature{UID: uid, WellKnownURL: ar.WellKnownURL, KeyID: key.Public.Thumbprint, Created: created, Expires: expires}, nil
}

// directoryVars are the credentials-file variables recording a directory
// signature's validity.
func directoryVars(created, expires time.Time) [][2]string {
	return [][2]string{
		{EnvDirectorySignedAt, strconv.FormatInt(created.Unix(), 10)},
		{EnvDirectorySignedUntil, strconv.FormatInt(expires.Unix(), 10)},
	}
}

// directoryState reads the recorded validity of the agent's directory
// signature from the credentials file; ok is false when none is recorded
// (or the record is not two Unix times in order).
func directoryState(f *envfile.File) (created, expires time.Time, ok bool) {
	a, _ := f.Get(EnvDirectorySignedAt)
	b, _ := f.Get(EnvDirectorySignedUntil)
	at, err1 := strconv.ParseInt(a, 10, 64)
	until, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || until <= at {
		return time.Time{}, time.Time{}, false
	}
	return time.Unix(at, 0), time.Unix(until, 0), true
}

// RefreshDue reports whether a directory signature valid from created to
// expires should be refreshed at now: once half its validity has passed.
func RefreshDue(created, expires, now time.Time) bool {
	return !now.Before(refreshAt(created, expires))
}

// refreshAt is when a directory signature valid from created to expires
// falls due for a refresh (RefreshDue): half way through its validity.
func refreshAt(created, expires time.Time) time.Time {
	return created.Add(expires.Sub(created) / 2)
}
