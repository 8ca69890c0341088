package store

// The service's own signing key: what the service signs with on its own
// behalf (the change events it posts to webhooks), as opposed to its
// agents' keys, whose private parts it never holds. The private JWK is
// kept in the database (table service_keys), so that every instance signs
// with the same key and a receiver fetching the service's key directory
// finds the key whichever instance signed: a backup of the database holds
// it, and whoever can read the table can sign as the service. It is
// created on first need, once whatever the number of instances starting
// together (an insert that does nothing when another won), and never
// reaches a log, an error or an answer: only signer.PrivateKey, whose
// formatting hides the private part, leaves this file.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/agentid/agentid/signer"
	"gorm.io/gorm/clause"
)

// ErrNoServiceKey: the service has no signing key yet (EnsureServiceKey
// creates it).
var ErrNoServiceKey = errors.New("store: the service has no signing key yet")

// serviceKeyName names the one key in use; the column leaves room for
// another (a rotation) without a schema change.
const serviceKeyName = "service"

// serviceKeyRow is a row of service_keys. It is unexported and never
// formatted: PrivateJWK is the private key.
type serviceKeyRow struct {
	ID         uint64    `gorm:"primaryKey"`
	Name       string    `gorm:"column:name;size:32;not null;uniqueIndex"`
	Kid        string    `gorm:"column:kid;size:64;not null"`
	PrivateJWK string    `gorm:"column:private_jwk;type:text;not null"`
	CreatedAt  time.Time `gorm:"column:created_at;not null"`
}

func (serviceKeyRow) TableName() string { return "service_keys" }

// migrationV1ServiceKey is service_keys as created by 20261210140000.
type migrationV1ServiceKey struct {
	ID         uint64    `gorm:"primaryKey"`
	Name       string    `gorm:"column:name;size:32;not null;uniqueIndex"`
	Kid        string    `gorm:"column:kid;size:64;not null"`
	PrivateJWK string    `gorm:"column:private_jwk;type:text;not null"`
	CreatedAt  time.Time `gorm:"column:created_at;not null"`
}

func (migrationV1ServiceKey) TableName() string { return "service_keys" }

// ServiceKey returns the service's signing key, or ErrNoServiceKey. It
// creates nothing: the service key directory, which anyone may fetch,
// reads it this way.
func (d *DB) ServiceKey(ctx context.Context) (signer.PrivateKey, error) {
	var rows []serviceKeyRow
	if err := d.g.WithContext(ctx).Where("name = ?", serviceKeyName).Limit(1).Find(&rows).Error; err != nil {
		return signer.PrivateKey{}, err
	}
	if len(rows) == 0 {
		return signer.PrivateKey{}, ErrNoServiceKey
	}
	k, err := signer.ParsePrivateJWK([]byte(rows[0].PrivateJWK))
	if err != nil {
		// The message of a JWK error names a member, never its value.
		return signer.PrivateKey{}, fmt.Errorf("store: the stored service key (kid %s) does not parse: %w", rows[0].Kid, err)
	}
	return k, nil
}

// EnsureServiceKey returns the service's signing key, creating it (a new
// Ed25519 key) when the database has none. Instances calling it at once
// all get the one key stored: each inserts its own only if no row holds
// the name (the unique index decides), then reads the row that won.
func (d *DB) EnsureServiceKey(ctx context.Context) (signer.PrivateKey, error) {
	k, err := d.ServiceKey(ctx)
	if !errors.Is(err, ErrNoServiceKey) {
		return k, err
	}
	nk, err := signer.GenerateKey(rand.Reader)
	if err != nil {
		return signer.PrivateKey{}, err
	}
	row := serviceKeyRow{Name: serviceKeyName, Kid: nk.Public.Thumbprint, PrivateJWK: string(nk.MarshalPrivateJWK()), CreatedAt: time.Now().UTC()}
	if err := d.g.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error; err != nil {
		return signer.PrivateKey{}, fmt.Errorf("store: create the service key: %w", err)
	}
	return d.ServiceKey(ctx)
}
