package refserver_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

func TestDBKeySource(t *testing.T) {
	t.Parallel()
	eachEnv(t, nil, func(t *testing.T, e *testEnv) {
		k1, k2, other := signertest.Key(71), signertest.Key(72), signertest.Key(73)
		uid := e.register(k1)
		e.register(other)
		if r := e.send(e.rotateReq(uid, k1, k2)); r.status != 200 {
			t.Fatalf("rotate: %d %s", r.status, r.body)
		}
		ks, err := refserver.NewDBKeySource(store.New(e.db), e.base)
		if err != nil {
			t.Fatal(err)
		}
		port := e.host[len("agentid.test"):]
		tests := []struct {
			name    string
			agent   string
			kid     string
			wantErr error
		}{
			{"active key", e.origin(uid), k2.KeyID(), nil},
			{"active key, uppercase origin", "HTTP://" + uid + ".AGENTID.TEST" + port, k2.KeyID(), nil},
			{"revoked key", e.origin(uid), k1.KeyID(), signer.ErrRevokedKey},
			{"another agent's key", e.origin(uid), other.KeyID(), signer.ErrUnknownKey},
			{"unknown key", e.origin(uid), signertest.Key(74).KeyID(), signer.ErrUnknownKey},
			{"unregistered agent", e.origin("agent-aaaaaaaaaaaaaaaaaaaaaaaa"), k2.KeyID(), signer.ErrUnknownKey},
			{"empty kid", e.origin(uid), "", signer.ErrUnknownKey},
			{"no agent", "", k2.KeyID(), signer.ErrUntrustedAgent},
			{"other scheme", "https://" + uid + "." + e.host, k2.KeyID(), signer.ErrInvalidSignatureAgent},
			{"service host itself", e.base, k2.KeyID(), signer.ErrUntrustedAgent},
			{"other port", "http://" + uid + ".agentid.test:1", k2.KeyID(), signer.ErrUntrustedAgent},
			{"look-alike suffix", "http://" + uid + ".xagentid.test" + port, k2.KeyID(), signer.ErrUntrustedAgent},
			{"nested label", "http://a." + uid + "." + e.host, k2.KeyID(), signer.ErrUntrustedAgent},
			{"not a uid", "http://bob." + e.host, k2.KeyID(), signer.ErrUntrustedAgent},
			{"foreign host", "https://" + uid + ".evil.example", k2.KeyID(), signer.ErrUntrustedAgent},
			{"with a path", e.origin(uid) + "/x", k2.KeyID(), signer.ErrInvalidSignatureAgent},
			// Every spelling of the two published forms is one of them;
			// any other form on an agent host is refused.
			{"directory URL", e.origin(uid) + "/.well-known/http-message-signatures-directory", k2.KeyID(), nil},
			{"respelled directory URL", "HTTP://" + strings.ToUpper(uid) + ".agentid.test" + port + "/a/../%2Ewell-known/http-message-signatures-directory", k2.KeyID(), nil},
			{"origin with a bare ?", e.origin(uid) + "/?", k2.KeyID(), nil},
			{"origin with a query", e.origin(uid) + "/?r=1", k2.KeyID(), signer.ErrInvalidSignatureAgent},
			{"directory URL with a query", e.origin(uid) + "/.well-known/http-message-signatures-directory?r=1", k2.KeyID(), signer.ErrInvalidSignatureAgent},
			{"jwks_uri", e.origin(uid) + ";type=jwks_uri", k2.KeyID(), signer.ErrInvalidSignatureAgent},
			{"cimd", e.origin(uid) + "/card.json;type=cimd", k2.KeyID(), signer.ErrInvalidSignatureAgent},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var set signer.KeySet
				if tt.agent != "" {
					sa, err := signer.ParseSignatureAgent([]string{`sig1="` + strings.ReplaceAll(tt.agent, ";", `";`) + ifNoType(tt.agent)})
					if err != nil {
						t.Fatal(err)
					}
					if set, err = sa.Members()[0].KeySet(); err != nil {
						t.Fatal(err)
					}
				}
				pk, err := ks.Key(context.Background(), set, tt.kid)
				if tt.wantErr == nil {
					if err != nil || pk.JWK.Kid != tt.kid {
						t.Errorf("Key = %v, %v; want kid %s", pk.JWK.Kid, err, tt.kid)
					}
					return
				}
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("Key error = %v, want %v", err, tt.wantErr)
				}
			})
		}

		// A database failure is 503 database_unavailable, not a missing key.
		sqlDB, _ := e.db.DB()
		sqlDB.Close()
		set, _ := signer.ParseKeySetURL(e.origin(uid))
		_, err = ks.Key(context.Background(), set, k2.KeyID())
		var me *middleware.Error
		if !errors.As(err, &me) || me.Code != "database_unavailable" || me.Status() != 503 {
			t.Errorf("Key with the database closed: error = %v, want 503 database_unavailable", err)
		}
		if errors.Is(err, signer.ErrUnknownKey) || errors.Is(err, signer.ErrRevokedKey) {
			t.Errorf("database failure reported as a key verdict: %v", err)
		}
	})
}

// ifNoType closes the string of a Signature-Agent member that has no
// ;type parameter.
func ifNoType(agent string) string {
	if strings.Contains(agent, ";") {
		return ""
	}
	return `"`
}

// countKeyQueries counts the statements on public_jwks run through db from
// now on.
func countKeyQueries(t *testing.T, db *gorm.DB) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	name := "test:count_key_queries_" + dbtest.RandomHex(4)
	err := db.Callback().Query().After("gorm:query").Register(name, func(tx *gorm.DB) {
		if tx.Statement.Table == "public_jwks" {
			n.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestUnknownKidNegativeCache: lookups of a kid no agent holds cost one
// query per key-cache TTL (random kids cannot turn into one query per
// request), and a registration or rotation through this instance makes the
// kid known at once.
func TestUnknownKidNegativeCache(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		clock := signertest.NewClock(time.Now()) // stands still until advanced
		e := newTestEnvConfig(t, db, "", func(c *refserver.Config) { c.Now = clock.Now; refserver.ManualKeySync(c) })
		owner := e.register(signertest.Key(81))
		ks := e.srv.KeySource()
		if !ks.SyncChanges(context.Background()) {
			t.Fatal("SyncChanges failed")
		}
		queries := countKeyQueries(t, db)
		ctx := context.Background()
		set := e.keySet

		unknown := signertest.Key(82)
		lookups := func(uid, kid string, n int, wantErr error) {
			t.Helper()
			for range n {
				if _, err := ks.Key(ctx, set(uid), kid); !errors.Is(err, wantErr) {
					t.Fatalf("Key(%s) error = %v, want %v", kid, err, wantErr)
				}
			}
		}
		lookups(owner, unknown.KeyID(), 50, signer.ErrUnknownKey)
		if got := queries.Load(); got != 1 {
			t.Errorf("queries for 50 lookups of one unknown kid = %d, want 1", got)
		}
		// The answer is per kid: another uid asking for it costs nothing.
		lookups("agent-aaaaaaaaaaaaaaaaaaaaaaaa", unknown.KeyID(), 5, signer.ErrUnknownKey)
		if got := queries.Load(); got != 1 {
			t.Errorf("queries after lookups by another uid = %d, want 1", got)
		}
		// Expired after the TTL: one more query.
		clock.Advance(refserver.DefaultKeyCacheTTL)
		lookups(owner, unknown.KeyID(), 10, signer.ErrUnknownKey)
		if got := queries.Load(); got != 2 {
			t.Errorf("queries after the TTL = %d, want 2", got)
		}

		// Registering the kid through this instance makes it known at once
		// (the clock has not moved).
		uid := e.register(unknown)
		before := queries.Load()
		if _, err := ks.Key(ctx, set(uid), unknown.KeyID()); err != nil {
			t.Errorf("Key of a kid registered after it was cached as unknown: %v", err)
		}
		if queries.Load() == before {
			t.Errorf("the lookup after registration was answered from the negative cache")
		}

		// Same for a rotation to a kid cached as unknown.
		next := signertest.Key(83)
		lookups(owner, next.KeyID(), 3, signer.ErrUnknownKey)
		if r := e.send(e.rotateReq(owner, signertest.Key(81), next)); r.status != 200 {
			t.Fatalf("rotate: %d %s", r.status, r.body)
		}
		if _, err := ks.Key(ctx, set(owner), next.KeyID()); err != nil {
			t.Errorf("Key of a kid rotated in after it was cached as unknown: %v", err)
		}
	})
}

// keySet is the key set of uid's origin, as the verifier hands it to the
// key source.
func (e *testEnv) keySet(uid string) signer.KeySet {
	e.t.Helper()
	s, err := signer.ParseKeySetURL(e.origin(uid))
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// heldQuery is a statement on public_jwks held by holdNextQuery.
type heldQuery struct {
	started chan struct{} // closed when the statement is held
	release func()        // lets it finish; called at cleanup too
}

// holdNextQuery holds the next statement on public_jwks whose SQL
// contains match, once it has read its rows, until release is called.
func holdNextQuery(t *testing.T, db *gorm.DB, match string) heldQuery {
	t.Helper()
	h := heldQuery{started: make(chan struct{})}
	released := make(chan struct{})
	var once sync.Once
	h.release = func() { once.Do(func() { close(released) }) }
	t.Cleanup(h.release)
	var armed atomic.Bool
	armed.Store(true)
	name := "test:hold_query_" + dbtest.RandomHex(4)
	err := db.Callback().Query().After("gorm:query").Register(name, func(tx *gorm.DB) {
		if tx.Statement.Table == "public_jwks" && strings.Contains(tx.Statement.SQL.String(), match) && armed.CompareAndSwap(true, false) {
			close(h.started)
			<-released
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestRotationForgetsLookupsInFlight: a key lookup or a directory read
// that began before a rotation committed answers its own caller with what
// it read, but neither the lookups that begin once the rotation has
// returned nor the caches: those refuse the revoked key and list the new
// one. (The 5 s timeouts only bound a failure: a later lookup sharing the
// held one would wait for it.)
func TestRotationForgetsLookupsInFlight(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db *gorm.DB) {
		// The change log is read by the test only: holdNextQuery registers
		// callbacks on db, which no other goroutine may be using.
		e := newTestEnvConfig(t, db, "", refserver.ManualKeySync)
		old, next, third := signertest.Key(87), signertest.Key(88), signertest.Key(89)
		uid := e.register(old)
		ks := e.srv.KeySource()
		ks.SyncChanges(context.Background())
		set := e.keySet(uid)
		ctx := context.Background()

		// A key lookup in flight across a rotation.
		held := holdNextQuery(t, db, "kid = ")
		before := make(chan error, 1)
		go func() {
			_, err := ks.Key(ctx, set, old.KeyID())
			before <- err
		}()
		<-held.started
		if err := e.srv.RotateAgent(ctx, uid, old.KeyID(), next.Public); err != nil {
			t.Fatalf("rotate: %v", err)
		}
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := ks.Key(tctx, set, old.KeyID())
		cancel()
		if !errors.Is(err, signer.ErrRevokedKey) {
			t.Errorf("Key(old kid) after the rotation, a lookup of it in flight: error = %v, want %v", err, signer.ErrRevokedKey)
		}
		held.release()
		if err := <-before; err != nil {
			t.Errorf("Key(old kid) begun before the rotation: %v, want the key it read", err)
		}
		if _, err := ks.Key(ctx, set, old.KeyID()); !errors.Is(err, signer.ErrRevokedKey) {
			t.Errorf("Key(old kid) once the lookup begun before the rotation is done: error = %v, want %v", err, signer.ErrRevokedKey)
		}

		// A directory read in flight across a rotation.
		held = holdNextQuery(t, db, "agent_uid = ")
		dirBefore := make(chan response, 1)
		go func() {
			r, err := e.do(e.request(http.MethodGet, e.directoryURL(uid), nil))
			if err != nil {
				r.body = []byte(err.Error())
			}
			dirBefore <- r
		}()
		<-held.started
		if err := e.srv.RotateAgent(ctx, uid, next.KeyID(), third.Public); err != nil {
			t.Fatalf("rotate: %v", err)
		}
		lists := func(what string, r response, want, notWant signer.PrivateKey) {
			t.Helper()
			if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(want.KeyID())) || bytes.Contains(r.body, []byte(notWant.KeyID())) {
				t.Errorf("%s: %d %s, want 200 listing %s and not %s", what, r.status, r.body, want.KeyID(), notWant.KeyID())
			}
		}
		tctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		r, err := e.do(e.request(http.MethodGet, e.directoryURL(uid), nil).WithContext(tctx))
		cancel()
		if err != nil {
			t.Errorf("directory after the rotation, a read of it in flight: %v", err)
		} else {
			lists("directory after the rotation, a read of it in flight", r, third, next)
		}
		held.release()
		lists("directory read begun before the rotation", <-dirBefore, next, third)
		lists("directory once the read begun before the rotation is done", e.send(e.request(http.MethodGet, e.directoryURL(uid), nil)), third, next)
	})
}
