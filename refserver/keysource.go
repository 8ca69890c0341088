package refserver

import (
	"context"
	"fmt"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
	"gorm.io/gorm"
)

// DBKeySource is a middleware.KeySource over the server's database: it
// resolves the keys of this server's own agents with one indexed query and
// no HTTP call. Nothing is cached, so a revoked key is refused by every
// instance as soon as the rotation commits. It is safe for concurrent use.
type DBKeySource struct {
	db          *gorm.DB
	scheme      string
	serviceHost string
	timeout     time.Duration
}

// NewDBKeySource returns a key source for the agents of the service at
// hostname (as Config.Hostname).
func NewDBKeySource(db *gorm.DB, hostname string) (*DBKeySource, error) {
	scheme, host, err := ParseHostname(hostname)
	if err != nil {
		return nil, err
	}
	return &DBKeySource{db: db, scheme: scheme, serviceHost: host, timeout: DefaultDBTimeout}, nil
}

// Key implements middleware.KeySource. agent must be exactly
// <scheme>://<uid>.<service host> (else an error wrapping
// signer.ErrUntrustedAgent, with no database access); keyID must be an
// active key of that uid (else signer.ErrUnknownKey, or signer.ErrRevokedKey
// for a revoked one). A database failure is a *middleware.Error with 503
// database_unavailable.
func (k *DBKeySource) Key(ctx context.Context, agent, keyID string) (signer.PublicKey, error) {
	uid := k.uidOf(agent)
	if uid == "" {
		if agent == "" {
			return signer.PublicKey{}, fmt.Errorf("%w: a Signature-Agent naming %s://<uid>.%s is required", signer.ErrUntrustedAgent, k.scheme, k.serviceHost)
		}
		return signer.PublicKey{}, fmt.Errorf("%w: %s is not an agent of %s://%s", signer.ErrUntrustedAgent, agent, k.scheme, k.serviceHost)
	}
	if keyID == "" || len(keyID) > 64 {
		return signer.PublicKey{}, signer.ErrUnknownKey
	}
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	var row PublicJWK
	err := k.db.WithContext(ctx).Where("kid = ?", keyID).Take(&row).Error
	if isNotFound(err) {
		return signer.PublicKey{}, signer.ErrUnknownKey
	}
	if err != nil {
		return signer.PublicKey{}, dbUnavailable(fmt.Errorf("refserver: key lookup: %w", err))
	}
	if row.AgentUID != uid {
		return signer.PublicKey{}, signer.ErrUnknownKey
	}
	if row.RevokedAt != nil {
		return signer.PublicKey{}, signer.ErrRevokedKey
	}
	return row.PublicKey()
}

// uidOf returns the uid of an agent origin of this service, or "".
func (k *DBKeySource) uidOf(agent string) string {
	if agent == "" {
		return ""
	}
	origin, err := signer.NormalizeOrigin(agent)
	if err != nil {
		return ""
	}
	prefix := k.scheme + "://"
	if len(origin) <= len(prefix) || origin[:len(prefix)] != prefix {
		return ""
	}
	host := origin[len(prefix):]
	suffix := "." + k.serviceHost
	if len(host) <= len(suffix) || host[len(host)-len(suffix):] != suffix {
		return ""
	}
	uid := host[:len(host)-len(suffix)]
	if !middleware.ValidUID(uid) {
		return ""
	}
	return uid
}

var _ middleware.KeySource = (*DBKeySource)(nil)
