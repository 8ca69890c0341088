package adminapi_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"gorm.io/gorm"
)

// env is a reference server on a fresh database, served over loopback,
// whose every answer and log line the test can search for secrets.
type env struct {
	t      testing.TB
	g      *gorm.DB
	db     *store.DB
	base   string // http://agentid.test:PORT
	client *http.Client
	logs   *signertest.SyncBuffer
	seen   bytes.Buffer // every answer's status line, headers and body
}

// eachBackend runs fn on SQLite and PostgreSQL.
func eachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, b.URL(t)))
		})
	}
}

func newEnv(t testing.TB, url string) *env {
	t.Helper()
	g := dbtest.Migrated(t, url)
	ts := httptest.NewUnstartedServer(nil)
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	e := &env{t: t, g: g, db: store.New(g), base: "http://agentid.test:" + port, logs: &signertest.SyncBuffer{}}
	srv, err := refserver.New(refserver.Config{DB: e.db, Hostname: e.base, MaxBodyBytes: 4096,
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(ts.Close)
	var d net.Dialer
	addr := ts.Listener.Addr().String()
	e.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}}}
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

// answer is an HTTP answer as read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the code of an error answer.
func (a answer) errorCode() string {
	code, _ := a.errorFields()
	return code
}

// message returns the message of an error answer.
func (a answer) message() string {
	_, msg := a.errorFields()
	return msg
}

func (a answer) errorFields() (string, string) {
	var b struct {
		Error struct {
			Status  int    `json:"status"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(a.body, &b) != nil || b.Error.Status != a.status {
		return "?", "?"
	}
	return b.Error.Code, b.Error.Message
}

// call sends method path (below the service's base URL) with body (JSON
// when not "") and the given Authorization values, and records the answer.
func (e *env) call(method, path, body string, auth ...string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, a := range auth {
		req.Header.Add("Authorization", a)
	}
	return e.do(req)
}

func (e *env) do(req *http.Request) answer {
	e.t.Helper()
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Header.Write(&e.seen)
	e.seen.Write(b)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// token creates an operator token name with scopes.
func (e *env) token(name string, scopes ...string) string {
	e.t.Helper()
	tok, _, err := e.db.CreateOperatorToken(context.Background(), name, scopes, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// agent registers an agent with the keys n… (in the database) and
// returns its uid.
func (e *env) agent(keys ...byte) string {
	e.t.Helper()
	uid, err := signer.NewUID(rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	for i, n := range keys {
		k := signertest.Key(n)
		jwk, _ := json.Marshal(k.Public.JWK)
		if i == 0 {
			err = e.db.CreateAgent(ctx, store.NewAgent{UID: uid, Kid: k.KeyID(), JWK: jwk, Now: time.Now()})
		} else {
			err = e.g.Create(&store.PublicJWK{Kid: k.KeyID(), AgentUID: uid, JWK: store.JSON(jwk), CreatedAt: time.Now()}).Error
		}
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return uid
}

// pendingAgent registers an agent pending review (registration mode
// approval) with the key n (in the database) and returns its uid.
func (e *env) pendingAgent(n byte) string {
	e.t.Helper()
	uid, err := signer.NewUID(rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	k := signertest.Key(n)
	if err := e.db.CreateAgent(context.Background(), store.NewAgent{UID: uid, Kid: k.KeyID(), JWK: k.Public.JWK.MarshalPublic(),
		Now: time.Now(), Pending: true}); err != nil {
		e.t.Fatal(err)
	}
	return uid
}

// noSecret fails the test if any answer or log line so far holds one of
// secrets.
func (e *env) noSecret(secrets ...string) {
	e.t.Helper()
	logs := e.logs.String()
	for _, s := range secrets {
		if strings.Contains(e.seen.String(), s) {
			e.t.Errorf("an answer holds the secret %s…", s[:10])
		}
		if strings.Contains(logs, s) {
			e.t.Errorf("the log holds the secret %s…", s[:10])
		}
	}
}
