package refserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/store"
)

func Example() {
	db, err := store.OpenGorm("sqlite::memory:")
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(context.Background(), db, nil); err != nil {
		panic(err)
	}
	srv, err := refserver.New(refserver.Config{DB: store.New(db), Hostname: "http://localhost:3000"})
	if err != nil {
		panic(err)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost:3000/", nil))
	fmt.Print(rec.Code, " ", rec.Body.String())

	rec = httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://agent-0123456789abcdef01234567.localhost:3000/.well-known/http-message-signatures-directory", nil))
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output:
	// 200 {"service":"agentid","status":"ok","version":"1.0.0"}
	// 404 {"error":{"status":404,"code":"agent_not_found","message":"agent agent-0123456789abcdef01234567 is not registered"}}
}
