package refserver_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// seedFiller adds n filler agents to the migrated PostgreSQL database db,
// each with one active key, in a few statements: uid fillerUID(seed, i)
// for i in [0, n), a JWK whose x is 32 bytes derived from the uid and
// whose kid is its RFC 7638 thumbprint (computed by PostgreSQL), so each
// row parses as a real key would (no private key exists for it). The
// agents are inserted in uid order and public_jwks' secondary indexes
// are dropped and built again afterwards (the same definitions, read from
// pg_indexes), with foreign-key triggers and the statement timeout off
// for the session; every row is consistent by construction. It then
// ANALYZEs the tables.
func seedFiller(t testing.TB, db *gorm.DB, seed string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	c, err := conn.Conn(ctx) // one session: session_replication_role and the temp table
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := c.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("seed: %s: %v", strings.Fields(q)[0:2], err)
		}
	}
	rows, err := c.QueryContext(ctx, `SELECT indexname, indexdef FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'public_jwks' AND indexname <> 'public_jwks_pkey'`)
	if err != nil {
		t.Fatal(err)
	}
	var names, defs []string
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		names, defs = append(names, name), append(defs, def)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	exec(`SET session_replication_role = replica`)
	defer exec(`SET session_replication_role = DEFAULT`)
	exec(`SET statement_timeout = 0`) // the connection's default is the server's 10 s
	defer exec(`RESET statement_timeout`)
	exec(`CREATE TEMP TABLE filler_seed AS
		SELECT 'agent-' || substr(md5($1 || ':' || g), 1, 24) AS uid FROM generate_series(0, $2 - 1) g`, seed, n)
	defer exec(`DROP TABLE filler_seed`)
	exec(`INSERT INTO agents (uid, created_at, updated_at) SELECT uid, now(), now() FROM filler_seed ORDER BY uid`)
	for _, name := range names {
		exec(`DROP INDEX "` + name + `"`)
	}
	exec(`WITH x AS (SELECT uid, rtrim(translate(encode(sha256(convert_to('x:' || uid, 'UTF8')), 'base64'), '+/', '-_'), '=') AS x FROM filler_seed),
		k AS (SELECT uid, x, rtrim(translate(encode(sha256(convert_to('{"crv":"Ed25519","kty":"OKP","x":"' || x || '"}', 'UTF8')), 'base64'), '+/', '-_'), '=') AS kid FROM x)
		INSERT INTO public_jwks (kid, agent_uid, jwk, created_at)
		SELECT kid, uid, jsonb_build_object('kty', 'OKP', 'crv', 'Ed25519', 'x', x, 'kid', kid), now() FROM k ORDER BY uid`)
	for _, def := range defs {
		exec(def)
	}
	exec(`ANALYZE agents`)
	exec(`ANALYZE public_jwks`)
}

// fillerUID is the uid of filler agent i of seedFiller(…, seed, …).
func fillerUID(seed string, i int) string {
	sum := md5.Sum(fmt.Appendf(nil, "%s:%d", seed, i))
	return signer.UIDPrefix + hex.EncodeToString(sum[:])[:24]
}

// insertAgents registers an agent per key in db as registration does (an
// agents row and its active public_jwks row) and returns their uids.
func insertAgents(t testing.TB, db *gorm.DB, keys []signer.PrivateKey) []string {
	t.Helper()
	now := time.Now().UTC()
	agents := make([]store.Agent, len(keys))
	jwks := make([]store.PublicJWK, len(keys))
	uids := make([]string, len(keys))
	for i, k := range keys {
		uid, err := signer.NewUID(nil)
		if err != nil {
			t.Fatal(err)
		}
		uids[i] = uid
		agents[i] = store.Agent{UID: uid, CreatedAt: now, UpdatedAt: now}
		jwks[i] = store.PublicJWK{Kid: k.Public.JWK.Kid, AgentUID: uid, JWK: store.JSON(k.Public.JWK.MarshalPublic()), CreatedAt: now}
	}
	if err := db.CreateInBatches(agents, 500).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.CreateInBatches(jwks, 500).Error; err != nil {
		t.Fatal(err)
	}
	return uids
}

// capturedQuery is one statement the server ran, with its arguments.
type capturedQuery struct {
	sql  string
	vars []any
}

// captureQueries records every statement db (and every session made from
// it) runs through gorm's query, row, raw and delete callbacks, lookups
// that found nothing included.
func captureQueries(t testing.TB, db *gorm.DB) func() []capturedQuery {
	t.Helper()
	var mu sync.Mutex
	var got []capturedQuery
	record := func(tx *gorm.DB) {
		if tx.Error != nil && !errors.Is(tx.Error, gorm.ErrRecordNotFound) || tx.Statement.SQL.Len() == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, capturedQuery{tx.Statement.SQL.String(), slices.Clone(tx.Statement.Vars)})
	}
	cb := db.Callback()
	for _, err := range []error{
		cb.Query().After("gorm:query").Register("scale:capture", record),
		cb.Row().After("gorm:row").Register("scale:capture", record),
		cb.Raw().After("gorm:raw").Register("scale:capture", record),
		cb.Delete().After("gorm:delete").Register("scale:capture", record),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return func() []capturedQuery {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

// scans returns "<node type> on <relation>[ using <index>]" for every
// node of p that reads a table.
func (p planNode) scans() []string {
	var out []string
	if p.Relation != "" {
		s := p.NodeType + " on " + p.Relation
		if p.Index != "" {
			s += " using " + p.Index
		}
		out = append(out, s)
	}
	for _, c := range p.Plans {
		out = append(out, c.scans()...)
	}
	return out
}

// grownTables are the tables that grow with the number of agents, keys
// and changes: a lookup on the request path must never read them whole.
var grownTables = []string{"agents", "public_jwks", "key_changes", "directory_signatures"}

// TestRequestPathQueriesUseIndexes drives a real server on a PostgreSQL
// database of 20,000 agents (with as many directory signatures and 5,000
// change-log rows, ANALYZEd, so the planner knows the tables are large)
// through every request on the hot path — a directory of a known, an
// unknown and a filler agent, a signed /whoami (the key lookup by kid),
// /whoami with an unknown kid, a registration, and the change log's
// reads — records every
// statement the server runs, and EXPLAINs each with its own arguments: no
// plan may scan agents, public_jwks, key_changes or directory_signatures
// sequentially, and each kind of lookup must have been seen.
func TestRequestPathQueriesUseIndexes(t *testing.T) {
	const agents = 20_000
	db := dbtest.Migrated(t, dbtest.PostgresURL(t))
	seedFiller(t, db, "plan", agents)
	for _, q := range []string{
		`INSERT INTO directory_signatures (agent_uid, kid, body_digest, input, value, created_at, expires_at)
			SELECT agent_uid, kid, sha256(convert_to(kid, 'UTF8')), '("@authority" "content-digest");created=1', sha256(convert_to(agent_uid, 'UTF8')), now(), now() + interval '1 day'
			FROM public_jwks`,
		`INSERT INTO key_changes (kid, agent_uid, change, actor, created_at)
			SELECT kid, agent_uid, 'revoke', 'seed', now() - interval '10 minutes' FROM public_jwks ORDER BY id LIMIT 5000`,
		`ANALYZE directory_signatures`, `ANALYZE key_changes`,
	} {
		if err := db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	queries := captureQueries(t, db)
	e := newTestEnv(t, db)
	key := signertest.Key(61)
	uid := insertAgents(t, db, []signer.PrivateKey{key})[0]

	for _, step := range []struct {
		req  func() *http.Request
		want int
	}{
		{func() *http.Request { return e.request("GET", e.directoryURL(uid), nil) }, 200},
		{func() *http.Request { return e.request("GET", e.directoryURL(fillerUID("plan", 4242)), nil) }, 200},
		{func() *http.Request {
			return e.request("GET", e.directoryURL(signer.UIDPrefix+strings.Repeat("0", 24)), nil)
		}, 404},
		{func() *http.Request { return e.whoamiReq("GET", uid, key) }, 200},
		{func() *http.Request { return e.whoamiReq("GET", uid, signertest.Key(62)) }, 401},
		{func() *http.Request { return e.registerReq(signertest.Key(63)) }, 201},
	} {
		if resp := e.send(step.req()); resp.status != step.want {
			t.Fatalf("%s: status %d, want %d: %s", step.req().URL, resp.status, step.want, resp.body)
		}
	}
	// The change log's reader starts with the first key lookup: its first
	// read takes the log's end, the next ones read past it, and the first
	// complete read prunes.
	deadline := time.Now().Add(10 * time.Second)
	for !seen(queries(), `"key_changes"`, `id > `) && time.Now().Before(deadline) {
		e.send(e.whoamiReq("GET", uid, key))
		time.Sleep(100 * time.Millisecond)
	}

	got := queries()
	for _, want := range []struct{ name, a, b string }{
		{"key lookup by kid", `JOIN agents`, `public_jwks.kid = `},
		{"directory keys by agent uid", `"public_jwks"`, `agent_uid = `},
		{"directory signatures by agent uid", `"directory_signatures"`, `agent_uid = `},
		{"unknown agent", `"agents"`, `uid = `},
		{"registration's key lookup", `"public_jwks" WHERE kid = `, `LIMIT`},
		{"change log end", `"key_changes"`, `MAX(id)`},
		{"change log read", `"key_changes"`, `id > `},
		{"change log prune", `DELETE FROM "key_changes"`, `created_at < `},
	} {
		if !seen(got, want.a, want.b) {
			t.Errorf("the server ran no %s query (%s … %s); it ran:\n%s", want.name, want.a, want.b, joinSQL(got))
		}
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	explained := map[string]bool{}
	for _, q := range got {
		if explained[q.sql] || !touches(q.sql) {
			continue
		}
		explained[q.sql] = true
		var out []byte
		if err := sqlDB.QueryRow("EXPLAIN (FORMAT JSON) "+q.sql, q.vars...).Scan(&out); err != nil {
			t.Fatalf("EXPLAIN %s: %v", q.sql, err)
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
			t.Fatalf("EXPLAIN %s: %v: %s", q.sql, err, out)
		}
		scans := plans[0].Plan.scans()
		t.Logf("%s\n\t%s", q.sql, strings.Join(scans, "; "))
		for _, s := range scans {
			for _, table := range grownTables {
				if strings.HasPrefix(s, "Seq Scan on "+table) {
					t.Errorf("%s reads %s whole: %s", q.sql, table, strings.Join(scans, "; "))
				}
			}
		}
	}
}

// seen reports whether some query holds both a and b.
func seen(qs []capturedQuery, a, b string) bool {
	return slices.ContainsFunc(qs, func(q capturedQuery) bool { return strings.Contains(q.sql, a) && strings.Contains(q.sql, b) })
}

// touches reports whether sql names one of grownTables.
func touches(sql string) bool {
	return slices.ContainsFunc(grownTables, func(t string) bool {
		return strings.Contains(sql, `"`+t+`"`) || strings.Contains(sql, " "+t+" ") || strings.Contains(sql, " "+t+".")
	})
}

func joinSQL(qs []capturedQuery) string {
	var b strings.Builder
	for _, q := range qs {
		b.WriteString("\t" + q.sql + "\n")
	}
	return b.String()
}
