// Package adminapi is the reference server's admin API: the routes under
// /admin/v1/ on the service host, for operators holding an operator token
// (store.CreateOperatorToken, `idcli server operators create`) sent as
// Authorization: Bearer. The table below is the one place that decides
// which scope each route needs; refserver mounts the routes Routes returns,
// each already checking its token and scope, and answers the errors they
// return. docs/http-api.md documents the routes and their JSON.
package adminapi

import (
	"context"
	"net/http"
	"time"

	"github.com/agentid/agentid/refserver/store"
)

// Prefix is the path every route of the admin API begins with.
const Prefix = "/admin/v1"

// Config is what the admin API runs with.
type Config struct {
	// DB is the server's database. Required.
	DB *store.DB
	// MaxBodyBytes caps request bodies (413 payload_too_large above).
	MaxBodyBytes int64
	// DBTimeout bounds the database work of one request.
	DBTimeout time.Duration
}

// Handler is a route's handler: it writes the answer or returns the error
// to answer with (a *middleware.Error; anything else is 500).
type Handler func(http.ResponseWriter, *http.Request) error

// Route is one route of the admin API: Handle authenticates the request's
// operator token, checks that it holds Scope, then serves it.
type Route struct {
	Method string
	Path   string // a gorilla/mux template, Prefix included
	Scope  string
	Handle Handler
}

// api serves the admin routes.
type api struct {
	cfg Config
}

// route is a row of the table: method, path below Prefix, the scope it
// needs, and its handler.
type route struct {
	method, path, scope string
	handle              func(*api, http.ResponseWriter, *http.Request) error
}

// routes decides who may call what: one row per route, each needing one
// scope. A route added here is served by refserver as it is.
var routes = []route{
	{http.MethodGet, "/agents", store.ScopeAgentsRead, (*api).listAgents},
	{http.MethodGet, "/agents/{uid}", store.ScopeAgentsRead, (*api).showAgent},
	{http.MethodDelete, "/agents/{uid}", store.ScopeAgentsWrite, (*api).deleteAgent},
	{http.MethodGet, "/agents/{uid}/keys", store.ScopeAgentsRead, (*api).keyHistory},
	{http.MethodPost, "/agents/{uid}/disable", store.ScopeAgentsWrite, (*api).disableAgent},
	{http.MethodPost, "/agents/{uid}/enable", store.ScopeAgentsWrite, (*api).enableAgent},
	{http.MethodPost, "/agents/{uid}/approve", store.ScopeAgentsWrite, (*api).approveAgent},
	{http.MethodPost, "/agents/{uid}/reject", store.ScopeAgentsWrite, (*api).rejectAgent},
	{http.MethodPost, "/agents/{uid}/keys/{kid}/revoke", store.ScopeKeysRevoke, (*api).revokeKey},
	{http.MethodGet, "/invitations", store.ScopeTokensWrite, (*api).listInvitations},
	{http.MethodPost, "/invitations", store.ScopeTokensWrite, (*api).createInvitation},
	{http.MethodPost, "/invitations/{id}/revoke", store.ScopeTokensWrite, (*api).revokeInvitation},
	{http.MethodGet, "/audit", store.ScopeAuditRead, (*api).audit},
}

// Routes returns the admin API's routes on cfg, in the table's order.
func Routes(cfg Config) []Route {
	a := &api{cfg: cfg}
	out := make([]Route, len(routes))
	for i, rt := range routes {
		out[i] = Route{Method: rt.method, Path: Prefix + rt.path, Scope: rt.scope, Handle: a.authorize(Prefix+rt.path, rt.scope, rt.handle)}
	}
	return out
}

// dbContext bounds the database work of a request.
func (a *api) dbContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.cfg.DBTimeout)
}
