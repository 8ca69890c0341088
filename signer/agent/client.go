package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentid/agentid/signer"
)

// Registration is the service's answer to a registration or a key rotation.
type Registration struct {
	// UID is the agent's uid.
	UID string
	// PublicJWK is the registered public key (no d).
	PublicJWK signer.JWK
	// WellKnownURL is the agent's key directory URL, as the service reported it.
	WellKnownURL string
	// IsNew is true when a registration created the agent, false when the key
	// was already registered (and always false for a rotation).
	IsNew bool
	// Pending is true when the agent waits for the approval of the
	// service's operator (a service whose registration needs one): until
	// then its directory lists no key and its requests are refused.
	Pending bool
	// DirectorySignedAt and DirectorySignedUntil bound the validity of the
	// directory signature a rotation handed over (zero for a registration).
	DirectorySignedAt, DirectorySignedUntil time.Time
}

// DefaultTimeout bounds each request to the service (registration,
// rotation, directory refresh) sent by a Client whose HTTPClient is nil,
// and each refresh of a RefreshTransport whose Timeout is 0.
const DefaultTimeout = 30 * time.Second

// defaultHTTPClient sends the requests of a Client whose HTTPClient is nil:
// unlike http.DefaultClient, its requests time out, so a service that
// takes a request and never answers holds up nothing for good.
var defaultHTTPClient = &http.Client{Timeout: DefaultTimeout}

// Client registers agents with an agentid service and rotates their keys.
// The zero value is ready to use; a Client is safe for concurrent use.
type Client struct {
	// HTTPClient sends the requests. If nil, a client whose requests time
	// out after DefaultTimeout (over http.DefaultTransport).
	HTTPClient *http.Client
	// Tag is the tag of the agent's own signature (sig1) of a rotation. If
	// "", web-bot-auth.
	Tag string
	// Nonce is the nonce of the agent's own signature of a rotation. If "",
	// 64 random bytes. A fixed nonce can be sent once only.
	Nonce string
	// Now is the signing clock. If nil, time.Now.
	Now func() time.Time
	// Rand is the source of nonces. If nil, crypto/rand.
	Rand io.Reader
	// DirectoryValidity is how long the directory signatures it makes
	// (RotateKey, RefreshDirectory) are valid. If 0,
	// DefaultDirectoryValidity.
	DirectoryValidity time.Duration
	// Invite, if set, is the invitation token a registration carries (for
	// a service whose registration needs one), in the Agentid-Invite
	// header, covered by the registration's signature.
	Invite string
}

// Register registers key with the service at serviceURL using a client
// with DefaultTimeout when client is nil. See Client.Register.
func Register(ctx context.Context, client *http.Client, serviceURL string, key signer.PrivateKey) (Registration, error) {
	return (&Client{HTTPClient: client}).Register(ctx, serviceURL, key)
}

// RotateKey replaces uid's key current with next at the service at
// serviceURL using a client with DefaultTimeout when client is nil. See
// Client.RotateKey.
func RotateKey(ctx context.Context, client *http.Client, serviceURL, uid string, current, next signer.PrivateKey) (Registration, error) {
	return (&Client{HTTPClient: client}).RotateKey(ctx, serviceURL, uid, current, next)
}

// Register sends POST {serviceURL}/agents with body {"public_jwk": key's
// public JWK}, signed by key itself (proof of possession: it covers
// @method, @authority, @path and content-digest, with no Signature-Agent),
// and checks that the service registered exactly that key under a valid
// uid. Registering a key twice is not an error: IsNew is then false.
// serviceURL is a service base URL (no scheme means https://).
func (c *Client) Register(ctx context.Context, serviceURL string, key signer.PrivateKey) (Registration, error) {
	svc, err := signer.ParseServiceURL(serviceURL)
	if err != nil {
		return Registration{}, err
	}
	req, err := newJSONRequest(ctx, http.MethodPost, svc.String()+"/agents", keyBody(key))
	if err != nil {
		return Registration{}, err
	}
	components := signer.WriteComponents
	if c.Invite != "" {
		req.Header.Set(signer.InviteHeader, c.Invite)
		components = append(append([]string(nil), components...), strings.ToLower(signer.InviteHeader))
	}
	if err := signer.Sign(req, key, signer.Options{
		Components: components,
		Now:        c.Now,
		Rand:       c.Rand,
	}); err != nil {
		return Registration{}, fmt.Errorf("agent: sign registration: %w", err)
	}
	ar, status, err := send(c.HTTPClient, req, http.StatusOK, http.StatusCreated)
	if err != nil {
		return Registration{}, err
	}
	if err := ar.checkKey(key); err != nil {
		return Registration{}, err
	}
	isNew := status == http.StatusCreated
	if ar.IsNew != nil {
		isNew = *ar.IsNew
	}
	return Registration{UID: ar.UID, PublicJWK: key.Public.JWK, WellKnownURL: ar.WellKnownURL, IsNew: isNew, Pending: ar.State == "pending"}, nil
}

// RotateKey sends PUT {serviceURL}/agents/{uid}/keys with body
// {"public_jwk": next's public JWK, "directory_signatures": [next's
// signature of the agent's directory as it will be after the rotation,
// see RefreshDirectory]}, signed twice: sig1 by current (it
// covers @method, @authority, @path, content-digest and
// "signature-agent";key="sig1", with Signature-Agent naming the agent) and
// sig2 by next (tag agentid-key-possession, the same components without
// signature-agent). It checks that the service answered for uid with
// exactly next. On success every other key of the agent is revoked.
func (c *Client) RotateKey(ctx context.Context, serviceURL, uid string, current, next signer.PrivateKey) (Registration, error) {
	svc, err := signer.ParseServiceURL(serviceURL)
	if err != nil {
		return Registration{}, err
	}
	if err := checkUID(uid); err != nil {
		return Registration{}, err
	}
	ds, dirCreated, dirExpires, err := c.signOwnDirectory(svc, uid, next)
	if err != nil {
		return Registration{}, err
	}
	u := svc.String() + "/agents/" + url.PathEscape(uid) + "/keys"
	body := jsonBody(map[string]any{"public_jwk": json.RawMessage(next.Public.JWK.MarshalPublic()),
		"directory_signatures": []directorySignatureJSON{ds}})
	req, err := newJSONRequest(ctx, http.MethodPut, u, body)
	if err != nil {
		return Registration{}, err
	}
	if err := c.signAsAgent(req, current, svc, uid); err != nil {
		return Registration{}, fmt.Errorf("agent: sign rotation: %w", err)
	}
	if err := signer.Sign(req, next, signer.Options{
		Label:      "sig2",
		Tag:        signer.KeyPossessionTag,
		Components: signer.WriteComponents,
		Now:        c.Now,
		Rand:       c.Rand,
	}); err != nil {
		return Registration{}, fmt.Errorf("agent: sign rotation: %w", err)
	}
	ar, _, err := send(c.HTTPClient, req, http.StatusOK)
	if err != nil {
		return Registration{}, err
	}
	if err := ar.checkKey(next); err != nil {
		return Registration{}, err
	}
	if ar.UID != uid {
		return Registration{}, fmt.Errorf("agent: the service answered for uid %s, want %s", ar.UID, uid)
	}
	return Registration{UID: uid, PublicJWK: next.Public.JWK, WellKnownURL: ar.WellKnownURL,
		DirectorySignedAt: dirCreated, DirectorySignedUntil: dirExpires}, nil
}

// signAsAgent signs req, a write to the agent's own resources, as sig1 by
// key for agent uid of svc: it covers @method, @authority, @path,
// content-digest and "signature-agent";key="sig1", with Signature-Agent
// naming the agent.
func (c *Client) signAsAgent(req *http.Request, key signer.PrivateKey, svc signer.ServiceURL, uid string) error {
	return signer.Sign(req, key, signer.Options{
		Components:     append(append([]string(nil), signer.WriteComponents...), `"signature-agent";key="sig1"`),
		Tag:            c.Tag,
		Nonce:          c.Nonce,
		SignatureAgent: svc.AgentOrigin(uid),
		Now:            c.Now,
		Rand:           c.Rand,
	})
}
