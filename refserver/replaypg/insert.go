package replaypg

// The upsert statements that record digests, through pgx on PostgreSQL or
// through gorm.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/jackc/pgx/v5/stdlib"
)

// insertSQL starts the statement that inserts each key's digest, or revives
// a row whose expiry has passed; an unexpired row is left alone, and
// One statement, so it is atomic on PostgreSQL (the primary key serialises
// concurrent inserts) and on SQLite (single writer); both accept this
// upsert syntax.
const (
	insertSQL     = `INSERT INTO replay_nonces (key_hash, expires_at) VALUES `
	onConflictSQL = ` ON CONFLICT (key_hash) DO UPDATE SET expires_at = excluded.expires_at ` +
		`WHERE replay_nonces.expires_at < ? RETURNING key_hash`
)

// unnestSQL is the same upsert on PostgreSQL with the keys as two arrays:
// one statement text whatever the batch size, so each connection prepares
// it once and reuses its plan.
const unnestSQL = `INSERT INTO replay_nonces (key_hash, expires_at) ` +
	`SELECT * FROM unnest($1::bytea[], $2::timestamptz[]) ` +
	`ON CONFLICT (key_hash) DO UPDATE SET expires_at = excluded.expires_at ` +
	`WHERE replay_nonces.expires_at < $3 RETURNING key_hash`

// digest is the stored form of a replay key.
type digest = [sha256.Size]byte

// keyHash binds a digest as one bytea/blob value (a bare []byte after "("
// in a raw statement would be expanded into one value per byte).
type keyHash digest

// Value implements driver.Valuer.
func (h keyHash) Value() (driver.Value, error) { return h[:], nil }

// errNotPgx: a pooled PostgreSQL connection is not pgx's.
var errNotPgx = errors.New("replaypg: not a pgx connection")

// insert runs one upsert of reqs' digests (distinct, sorted) and reports
// for each whether it was inserted or revived. Errors wrap
// middleware.ErrReplayStore.
func (s *Store) insert(ctx context.Context, now time.Time, reqs []*seenReq) ([]bool, error) {
	s.stmts.Add(1)
	if s.pg != nil && !s.noPgx.Load() {
		fresh, err := s.insertPgx(ctx, now, reqs)
		if !errors.Is(err, errNotPgx) {
			return fresh, err
		}
		s.noPgx.Store(true)
	}
	if len(reqs) == 1 {
		return s.insertOne(ctx, now, reqs[0])
	}
	var sb strings.Builder
	sb.Grow(len(insertSQL) + 8*len(reqs) + len(onConflictSQL))
	sb.WriteString(insertSQL)
	args := make([]any, 0, 2*len(reqs)+1)
	for i, r := range reqs {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?)")
		args = append(args, keyHash(r.sum), keptUntil(r, now))
	}
	sb.WriteString(onConflictSQL)
	args = append(args, now)

	rows, err := s.cfg.DB.WithContext(ctx).Raw(sb.String(), args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
	}
	defer rows.Close()
	fresh := make([]bool, len(reqs))
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
		}
		if err := markFresh(reqs, fresh, b); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
	}
	return fresh, nil
}

// insertPgx is insert on PostgreSQL through pgx on a pooled connection:
// unnestSQL, prepared once per connection, with the digests and expiries
// as two arrays. pgx follows ctx without a goroutine of its own (a
// database/sql query with rows to read would start one).
func (s *Store) insertPgx(ctx context.Context, now time.Time, reqs []*seenReq) ([]bool, error) {
	hashes := make([][]byte, len(reqs))
	expiries := make([]time.Time, len(reqs))
	for i, r := range reqs {
		hashes[i] = r.sum[:]
		expiries[i] = keptUntil(r, now)
	}
	fresh := make([]bool, len(reqs))
	conn, err := s.pg.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
	}
	defer conn.Close()
	if observe := s.cfg.ObserveStatement; observe != nil {
		defer func(start time.Time) { observe(time.Since(start)) }(time.Now())
	}
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		rows, err := c.Conn().Query(ctx, unnestSQL, hashes, expiries, now)
		if err != nil {
			return err
		}
		defer rows.Close()
		var d digestScan
		for rows.Next() {
			if err := rows.Scan(&d); err != nil {
				return err
			}
			if err := markFresh(reqs, fresh, d.b); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	switch {
	case errors.Is(err, errNotPgx), errors.Is(err, middleware.ErrReplayStore):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, err)
	}
	return fresh, nil
}

// digestScan receives a returned key_hash from pgx without a copy of its
// own; b is valid until the next row.
type digestScan struct{ b []byte }

// ScanBytes implements pgtype.BytesScanner.
func (d *digestScan) ScanBytes(v []byte) error { d.b = v; return nil }

// markFresh sets fresh[i] for the request of reqs (sorted by digest) whose
// digest is b.
func markFresh(reqs []*seenReq, fresh []bool, b []byte) error {
	if len(b) != sha256.Size {
		return fmt.Errorf("%w: replaypg: a stored digest has %d bytes, want %d", middleware.ErrReplayStore, len(b), sha256.Size)
	}
	i, ok := slices.BinarySearchFunc(reqs, b, func(r *seenReq, b []byte) int { return bytes.Compare(r.sum[:], b) })
	if !ok {
		return fmt.Errorf("%w: replaypg: the database returned a digest not inserted", middleware.ErrReplayStore)
	}
	fresh[i] = true
	return nil
}

// keptUntil is r's expiry, or now+MinTTL if that is later.
func keptUntil(r *seenReq, now time.Time) time.Time {
	if min := now.Add(MinTTL); r.expiry.Before(min) {
		return min
	}
	return r.expiry
}

// insertOne is insert of one digest through gorm, told apart by the
// number of rows the statement changed rather than by RETURNING: an Exec,
// unlike a query with rows to read, costs database/sql no goroutine
// watching ctx.
func (s *Store) insertOne(ctx context.Context, now time.Time, r *seenReq) ([]bool, error) {
	res := s.cfg.DB.WithContext(ctx).Exec(insertOneSQL, keyHash(r.sum), keptUntil(r, now), now)
	if res.Error != nil {
		return nil, fmt.Errorf("%w: replaypg: %w", middleware.ErrReplayStore, res.Error)
	}
	return []bool{res.RowsAffected > 0}, nil
}

// insertOneSQL is the upsert of one digest without RETURNING: the row
// count (1 if inserted or revived, 0 if an unexpired row was left alone)
// tells the outcome.
const insertOneSQL = insertSQL + `(?, ?) ON CONFLICT (key_hash) DO UPDATE SET expires_at = excluded.expires_at ` +
	`WHERE replay_nonces.expires_at < ?`
