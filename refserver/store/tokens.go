package store

// Operator tokens: the bearer tokens of the admin API. An operator creates
// one on the database (`idcli server operators create`), with a name,
// scopes and an expiry; the token is shown once and only its SHA-256
// digest is stored. Every time in operator_tokens is the database's clock,
// written and compared by SQL (CURRENT_TIMESTAMP), never a machine's: the
// CLI that creates a token and the instances that check it may disagree on
// the time, the database does not disagree with itself.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/agentid/agentid/signer/suggest"
	"gorm.io/gorm"
)

// Scopes of operator tokens: what each lets its holder do through the
// admin API (the table of routes in refserver/internal/adminapi decides
// which route needs which).
const (
	ScopeAgentsRead  = "agents:read"  // list and show agents
	ScopeAgentsWrite = "agents:write" // disable and enable agents
	ScopeKeysRevoke  = "keys:revoke"  // revoke an agent's key
	ScopeTokensWrite = "tokens:write" // create, list and revoke invitation tokens
	ScopeAuditRead   = "audit:read"   // read the audit trail
)

// Scopes returns every scope, in the order tokens list them.
func Scopes() []string {
	return []string{ScopeAgentsRead, ScopeAgentsWrite, ScopeKeysRevoke, ScopeTokensWrite, ScopeAuditRead}
}

// OperatorTokenPrefix starts every operator token; 43 base64url
// characters (32 random bytes) follow.
const OperatorTokenPrefix = "aidop_"

// OperatorTokenLen is the length of an operator token.
const OperatorTokenLen = len(OperatorTokenPrefix) + 43

// MaxOperatorTokenTTL is the longest lifetime of an operator token: a
// token nobody revoked (forgotten in a CI secret, leaked with a laptop)
// stops working within a year, and replacing one is a create and a revoke.
const MaxOperatorTokenTTL = 365 * 24 * time.Hour

// lastUsedEvery is how often at most last_used_at of a token is written:
// a token's every request reads its row, once a minute one writes it.
const lastUsedEvery = time.Minute

// Errors of the operator token methods, matched with errors.Is.
var (
	// ErrOperatorTokenUnknown: no token has this digest (or the token is
	// not of the operator token format).
	ErrOperatorTokenUnknown = errors.New("store: unknown operator token")
	// ErrOperatorTokenRevoked: the token was revoked.
	ErrOperatorTokenRevoked = errors.New("store: operator token revoked")
	// ErrOperatorTokenExpired: the token's expiry has passed.
	ErrOperatorTokenExpired = errors.New("store: operator token expired")
	// ErrNoSuchOperatorToken: no token has this name.
	ErrNoSuchOperatorToken = errors.New("store: no such operator token")
	// ErrOperatorTokenExists: a token (revoked or not) has this name.
	ErrOperatorTokenExists = errors.New("store: the operator token name is taken")
	// ErrInvalidOperatorToken: a name, scope or lifetime refused.
	ErrInvalidOperatorToken = errors.New("store: invalid operator token request")
)

// OperatorToken is an operator token (table operator_tokens). Names are
// never reused, so the actor "operator:<name>" of the audit trail names
// one token forever; a revoked token's row is kept.
type OperatorToken struct {
	ID         uint64     `gorm:"primaryKey"`
	Name       string     `gorm:"column:name;size:64;not null;uniqueIndex"`
	Prefix     string     `gorm:"column:prefix;size:16;not null"`
	Hash       []byte     `gorm:"column:hash;not null;uniqueIndex"`
	Scopes     string     `gorm:"column:scopes;size:200;not null"` // space-separated
	CreatedAt  time.Time  `gorm:"column:created_at;not null"`
	ExpiresAt  time.Time  `gorm:"column:expires_at;not null"`
	RevokedAt  *time.Time `gorm:"column:revoked_at"`
	LastUsedAt *time.Time `gorm:"column:last_used_at"`
}

// TableName implements gorm's tabler.
func (OperatorToken) TableName() string { return "operator_tokens" }

// migrationV1OperatorToken is operator_tokens as created by
// 20261210130000.
type migrationV1OperatorToken struct {
	ID         uint64     `gorm:"primaryKey"`
	Name       string     `gorm:"column:name;size:64;not null;uniqueIndex"`
	Prefix     string     `gorm:"column:prefix;size:16;not null"`
	Hash       []byte     `gorm:"column:hash;not null;uniqueIndex"`
	Scopes     string     `gorm:"column:scopes;size:200;not null"`
	CreatedAt  time.Time  `gorm:"column:created_at;not null"`
	ExpiresAt  time.Time  `gorm:"column:expires_at;not null"`
	RevokedAt  *time.Time `gorm:"column:revoked_at"`
	LastUsedAt *time.Time `gorm:"column:last_used_at"`
}

func (migrationV1OperatorToken) TableName() string { return "operator_tokens" }

// States of an operator token (OperatorTokenInfo.State).
const (
	TokenActive  = "active"
	TokenRevoked = "revoked"
	TokenExpired = "expired"
)

// OperatorTokenInfo is an operator token as listed (never the token).
type OperatorTokenInfo struct {
	Name   string   `json:"name"`
	Prefix string   `json:"prefix"`
	Scopes []string `json:"scopes"`
	// State is TokenActive, TokenRevoked or TokenExpired, by the
	// database's clock when it was read.
	State      string     `json:"state"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// Allows reports whether the token has scope.
func (i OperatorTokenInfo) Allows(scope string) bool { return slices.Contains(i.Scopes, scope) }

// tokenRow is a row of operator_tokens with what the database's clock
// says of it.
type tokenRow struct {
	OperatorToken `gorm:"embedded"`
	Expired       bool `gorm:"column:expired"`
	Stale         bool `gorm:"column:stale"` // last_used_at is due to be written
}

func (r tokenRow) info() OperatorTokenInfo {
	state := TokenActive
	switch {
	case r.RevokedAt != nil:
		state = TokenRevoked
	case r.Expired:
		state = TokenExpired
	}
	return OperatorTokenInfo{Name: r.Name, Prefix: r.Prefix, Scopes: strings.Fields(r.Scopes), State: state,
		CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(), RevokedAt: utcPtr(r.RevokedAt), LastUsedAt: utcPtr(r.LastUsedAt)}
}

// dbNow is the SQL expression of the database's clock, plus d (SQLite:
// UTC text with milliseconds, which compares as the time it names).
func dbNow(db *gorm.DB, d time.Duration) string {
	ms := d.Milliseconds()
	if db.Dialector.Name() == "postgres" {
		if ms == 0 {
			return "CURRENT_TIMESTAMP"
		}
		return fmt.Sprintf("(CURRENT_TIMESTAMP + INTERVAL '%d milliseconds')", ms)
	}
	if ms == 0 {
		return "strftime('%Y-%m-%d %H:%M:%f', 'now')"
	}
	return fmt.Sprintf("strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '%+d.%03d seconds')", ms/1000, abs(ms%1000))
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// selectTokens selects the rows of operator_tokens with their expired and
// stale flags.
func selectTokens(db *gorm.DB) *gorm.DB {
	return db.Table("operator_tokens").Select("operator_tokens.*, " +
		"(expires_at <= " + dbNow(db, 0) + ") AS expired, " +
		"(last_used_at IS NULL OR last_used_at <= " + dbNow(db, -lastUsedEvery) + ") AS stale")
}

var operatorNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// ValidOperatorName reports whether name is a valid operator token name:
// 1 to 64 of a-z 0-9 . _ -, beginning with a letter or a digit.
func ValidOperatorName(name string) bool { return operatorNameRe.MatchString(name) }

// ParseScopes reads a list of scopes separated by commas or white space,
// and returns them without repeats, in the order of Scopes. An unknown
// scope, or none, is an error naming the scopes.
func ParseScopes(s string) ([]string, error) {
	all := Scopes()
	seen := map[string]bool{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if !slices.Contains(all, f) {
			hint := ""
			if c := suggest.Close(f, all); len(c) > 0 {
				hint = " (did you mean " + c[0] + "?)"
			}
			return nil, fmt.Errorf("%w: unknown scope %q%s; the scopes are %s", ErrInvalidOperatorToken, truncate(f), hint, strings.Join(all, ", "))
		}
		seen[f] = true
	}
	var out []string
	for _, sc := range all {
		if seen[sc] {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: a token needs at least one scope (%s)", ErrInvalidOperatorToken, strings.Join(all, ", "))
	}
	return out, nil
}

// truncate shortens s, which a user typed, for a message.
func truncate(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// ValidOperatorTokenFormat reports whether token has the form of an
// operator token (the prefix, then 43 base64url characters).
func ValidOperatorTokenFormat(token string) bool {
	rest, ok := strings.CutPrefix(token, OperatorTokenPrefix)
	if !ok || len(rest) != 43 {
		return false
	}
	_, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	return err == nil
}

func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// CreateOperatorToken creates the operator token name with scopes (see
// ParseScopes), good for ttl (at most MaxOperatorTokenTTL) from now by
// the database's clock, on behalf of the actor in ctx (see WithActor); the
// audit trail records it (its name, scopes and expiry, never the token). The token is returned once; only its SHA-256
// digest is stored (32 random bytes need no slow hash: nothing can guess
// them). ErrOperatorTokenExists when the name is taken,
// ErrInvalidOperatorToken for a name, scope or ttl refused.
func (d *DB) CreateOperatorToken(ctx context.Context, name string, scopes []string, ttl time.Duration) (string, OperatorTokenInfo, error) {
	if !ValidOperatorName(name) {
		return "", OperatorTokenInfo{}, fmt.Errorf("%w: name %q: want 1 to 64 of a-z 0-9 . _ -, beginning with a letter or digit", ErrInvalidOperatorToken, truncate(name))
	}
	scopes, err := ParseScopes(strings.Join(scopes, " "))
	if err != nil {
		return "", OperatorTokenInfo{}, err
	}
	if ttl <= 0 || ttl > MaxOperatorTokenTTL {
		return "", OperatorTokenInfo{}, fmt.Errorf("%w: lifetime %v: want more than 0 and at most %v (a year)", ErrInvalidOperatorToken, ttl, MaxOperatorTokenTTL)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", OperatorTokenInfo{}, err
	}
	token := OperatorTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	var info OperatorTokenInfo
	err = d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		err := tx.Exec(`INSERT INTO "operator_tokens" ("name", "prefix", "hash", "scopes", "created_at", "expires_at") VALUES (?, ?, ?, ?, `+
			dbNow(tx, 0)+`, `+dbNow(tx, ttl)+`)`,
			name, token[:len(OperatorTokenPrefix)+6], tokenHash(token), strings.Join(scopes, " ")).Error
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			return fmt.Errorf("%w: %s (names are never reused, even revoked ones: pick another)", ErrOperatorTokenExists, name)
		}
		if err != nil {
			return err
		}
		var row tokenRow
		if err := selectTokens(tx).Where("name = ?", name).Take(&row).Error; err != nil {
			return err
		}
		info = row.info()
		return record(tx, auditEntry{Action: ActionOperatorCreate,
			Detail: map[string]any{"name": name, "scopes": strings.Join(scopes, " "), "expires_at": info.ExpiresAt}})
	})
	if err != nil {
		return "", OperatorTokenInfo{}, err
	}
	return token, info, nil
}

// ListOperatorTokens returns every operator token, by name.
func (d *DB) ListOperatorTokens(ctx context.Context) ([]OperatorTokenInfo, error) {
	var rows []tokenRow
	if err := selectTokens(d.g.WithContext(ctx)).Order("name").Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make([]OperatorTokenInfo, len(rows))
	for i, r := range rows {
		out[i] = r.info()
	}
	return out, nil
}

// RevokeOperatorToken revokes the operator token name, on behalf of the
// actor in ctx (recorded in the audit trail): the admin API refuses it
// from the next request on. It returns the token as it is
// after the change and whether anything changed (false when it already
// was revoked), or ErrNoSuchOperatorToken.
func (d *DB) RevokeOperatorToken(ctx context.Context, name string) (OperatorTokenInfo, bool, error) {
	var info OperatorTokenInfo
	changed := false
	err := d.g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(`UPDATE "operator_tokens" SET "revoked_at" = `+dbNow(tx, 0)+` WHERE "name" = ? AND "revoked_at" IS NULL`, name)
		if res.Error != nil {
			return res.Error
		}
		changed = res.RowsAffected > 0
		var row tokenRow
		if err := selectTokens(tx).Where("name = ?", name).Take(&row).Error; err != nil {
			if isNotFound(err) {
				return fmt.Errorf("%w: %s", ErrNoSuchOperatorToken, truncate(name))
			}
			return err
		}
		info = row.info()
		if !changed {
			return nil
		}
		return record(tx, auditEntry{Action: ActionOperatorRevoke, Detail: map[string]any{"name": name}})
	})
	return info, changed, err
}

// OperatorActor is the actor the audit trail records for a change made
// with the operator token name.
func OperatorActor(name string) string { return "operator:" + name }

// OperatorUse is the request an operator token authenticates, as the
// audit trail records its use: its method and its route's template
// (/admin/v1/agents/{uid}), never a value from its path or query.
type OperatorUse struct {
	Method string
	Route  string
}

// AuthenticateOperator returns the operator token token, unless it is
// unknown (ErrOperatorTokenUnknown, also for a string not of the token
// format), revoked (ErrOperatorTokenRevoked) or expired by the database's
// clock (ErrOperatorTokenExpired). The token is looked up by its digest
// (an index lookup on a SHA-256 digest tells a timing attacker nothing of
// the token). At most once a minute per token, its use is recorded: one
// transaction writes its last_used_at and an audit row
// ActionOperatorUsed (actor OperatorActor, the request id of ctx, detail
// use); a failure of that write fails the authentication, so no use
// recorded as due goes unrecorded.
func (d *DB) AuthenticateOperator(ctx context.Context, token string, use OperatorUse) (OperatorTokenInfo, error) {
	if !ValidOperatorTokenFormat(token) {
		return OperatorTokenInfo{}, ErrOperatorTokenUnknown
	}
	db := d.g.WithContext(ctx)
	var row tokenRow
	if err := selectTokens(db).Where("hash = ?", tokenHash(token)).Take(&row).Error; err != nil {
		if isNotFound(err) {
			return OperatorTokenInfo{}, ErrOperatorTokenUnknown
		}
		return OperatorTokenInfo{}, err
	}
	info := row.info()
	switch info.State {
	case TokenRevoked:
		return info, ErrOperatorTokenRevoked
	case TokenExpired:
		return info, ErrOperatorTokenExpired
	}
	if row.Stale {
		err := d.g.WithContext(WithActor(ctx, OperatorActor(info.Name))).Transaction(func(tx *gorm.DB) error {
			// The condition again: of the instances that found it stale
			// at once, one writes, and records the use.
			res := tx.Exec(`UPDATE "operator_tokens" SET "last_used_at" = `+dbNow(tx, 0)+
				` WHERE "id" = ? AND ("last_used_at" IS NULL OR "last_used_at" <= `+dbNow(tx, -lastUsedEvery)+`)`, row.ID)
			if res.Error != nil || res.RowsAffected == 0 {
				return res.Error
			}
			return record(tx, auditEntry{Action: ActionOperatorUsed, Detail: map[string]any{
				"method": clip(use.Method, 16), "route": clip(use.Route, 128)}})
		})
		if err != nil {
			return OperatorTokenInfo{}, err
		}
	}
	return info, nil
}
