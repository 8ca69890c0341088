package refserver

import (
	"context"
	"net/http"
	"sort"
	"strings"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/refserver/internal/adminapi"
	"github.com/agentid/agentid/signer"
	"github.com/gorilla/mux"
)

// routes registers every route of the server. API routes answer on the
// service host only; the key directory answers on <uid>.<service host>
// only; any other authority gets 421 misdirected_request.
func (s *Server) routes() http.Handler {
	r := mux.NewRouter()
	r.SkipClean(true) // never answer an unclean path with a non-JSON redirect
	r.NotFoundHandler = s.serve(metrics.Unmatched, s.notFound)
	r.MethodNotAllowedHandler = s.serve(metrics.Unmatched, s.methodNotAllowed)
	// Methods are dispatched by byMethod rather than mux's Methods matcher:
	// mux 1.8.1 loses a method mismatch when a later route's host matcher
	// matches, answering 404 where 405 is right.
	api := r.MatcherFunc(s.onServiceHost).Subrouter()
	s.handle(api, "/", methods{http.MethodGet: s.health})
	s.handle(api, "/readyz", methods{http.MethodGet: s.ready})
	s.handle(api, "/agents", methods{http.MethodPost: s.limitRegistration(s.registerAgent)})
	s.handle(api, "/agents/{uid}/keys", methods{http.MethodPut: s.rotateKeys})
	s.handle(api, "/agents/{uid}/directory-signatures", methods{http.MethodPut: s.refreshDirectorySignatures})
	s.whoamiRoute = s.handle(api, "/whoami", methods{http.MethodGet: s.whoami, http.MethodPost: s.whoami})
	if s.cfg.VestauthCompat {
		s.compatRoutes(api)
	}
	s.handle(api, signer.DirectoryPath, methods{
		http.MethodGet:     s.serviceDirectory,
		http.MethodOptions: s.directoryPreflight,
	})
	if p := s.cfg.Status; p != nil {
		s.handle(api, "/status", methods{http.MethodGet: plain(p)})
	}
	s.handle(api, "/keys/{kid}/status", methods{http.MethodGet: s.keyStatus})
	s.adminRoutes(api)

	dir := r.MatcherFunc(s.onAgentHost).Subrouter()
	s.handle(dir, signer.DirectoryPath, methods{
		http.MethodGet:     ownForm(s.directory),
		http.MethodOptions: s.directoryPreflight,
	})
	// The agent origin itself, the URL its agents send in Signature-Agent:
	// a protocol-01 verifier fetches it as sent, so it serves the same key
	// set.
	s.handle(dir, "/", methods{
		http.MethodGet:     ownForm(s.directory),
		http.MethodOptions: s.directoryPreflight,
	})
	return r
}

// adminRoutes mounts the admin API (refserver/internal/adminapi, whose
// table decides which operator token scope may call which route) under
// /admin/v1/ on the service host.
func (s *Server) adminRoutes(api *mux.Router) {
	byPath := map[string]methods{}
	var paths []string
	for _, rt := range adminapi.Routes(adminapi.Config{DB: s.db, MaxBodyBytes: s.cfg.MaxBodyBytes, DBTimeout: s.cfg.DBTimeout}) {
		if byPath[rt.Path] == nil {
			byPath[rt.Path] = methods{}
			paths = append(paths, rt.Path)
		}
		byPath[rt.Path][rt.Method] = handler(rt.Handle)
	}
	for _, p := range paths {
		s.handle(api, p, byPath[p])
	}
}

// ownForm serves an agent's key directory only under the server's own two
// forms, spelled as the server spells them: with a query (even a bare "?")
// or with any percent-encoding in the path (".well-known%2Fhttp-…",
// "%68ttp-…", which the router would decode to the same route) it is 404
// not_found, not a redirect (verifiers do not follow redirects, and one
// that did would still learn a new URL for the same keys). A verifier keys
// its caches, deny lists and budgets by the key-set URL it was given; if
// another spelling served the directory, each would be one more identity
// of the same agent.
func ownForm(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := ownFormCheck(r); err != nil {
			return err
		}
		return h(w, r)
	}
}

// ownFormCheck refuses a directory request with a query or an escape in
// its path (see ownForm).
func ownFormCheck(r *http.Request) error {
	if r.URL.RawQuery != "" || r.URL.ForceQuery || r.URL.RawPath != "" {
		return middleware.Fail(CodeNotFound, "a key directory has no query and no escapes: it is served at %s only (and at / on an agent host)", signer.DirectoryPath)
	}
	return nil
}

// direct serves the requests for path on the service host with h, the
// handler the router would choose for them, without the router: its
// matching and the two copies of the request it makes to carry route
// variables (which h does not read) cost more than the rest of routing on
// /whoami, the route every verified request takes. Other requests go to
// router.
func (s *Server) direct(path string, h, router http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path {
			if k, _ := s.classify(r); k == hostService {
				h.ServeHTTP(w, r)
				return
			}
		}
		router.ServeHTTP(w, r)
	})
}

// methods are a route's handlers by request method.
type methods map[string]handler

// plain is h as a handler that returns no error (it answers every request
// itself).
func plain(h http.Handler) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		h.ServeHTTP(w, r)
		return nil
	}
}

// handle registers a route's handlers (by method, see byMethod) at the
// path template on router, and returns the handler registered. The
// template names the route in the metrics.
func (s *Server) handle(router *mux.Router, template string, hs methods) http.Handler {
	h := s.serve(template, s.byMethod(hs))
	router.Handle(template, h)
	return h
}

// limitRegistration applies RegisterLimit, if set, to a registration
// handler: the limit is checked before the body is read or a signature
// verified, and a refusal is answered (and logged with its code) like any
// other error.
func (s *Server) limitRegistration(h handler) handler {
	lim := s.cfg.RegisterLimit
	if lim == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := lim.Check(w, r); err != nil {
			return err
		}
		return h(w, r)
	}
}

type hostKind int

const (
	hostOther      hostKind = iota
	hostInvalid             // not a host[:port] authority (two ports, an empty port, bad characters…)
	hostService             // the service host
	hostAgent               // <uid>.<service host> with a well-formed uid
	hostAgentLabel          // <label>.<service host> where label is not a uid
)

// classify sorts the request's authority and returns the uid of an agent
// host. The Host must be a well-formed host[:port] before it is
// normalised (signer.ParseAuthority): "localhost:3000:80" is refused, not
// read as localhost:3000 with its default port dropped.
func (s *Server) classify(r *http.Request) (hostKind, string) {
	h, err := signer.ParseAuthority(s.service.Scheme, r.Host)
	switch {
	case err != nil:
		return hostInvalid, ""
	case h == s.service.Host:
		return hostService, ""
	}
	if uid := s.service.UIDOfHost(h); uid != "" {
		return hostAgent, uid
	}
	if label, ok := strings.CutSuffix(h, s.agentSuffix); ok && label != "" && !strings.Contains(label, ".") {
		return hostAgentLabel, ""
	}
	return hostOther, ""
}

func (s *Server) onServiceHost(r *http.Request, _ *mux.RouteMatch) bool {
	k, _ := s.classify(r)
	return k == hostService
}

func (s *Server) onAgentHost(r *http.Request, _ *mux.RouteMatch) bool {
	k, _ := s.classify(r)
	return k == hostAgent
}

// notFound answers unmatched requests: 400 invalid_authority for a Host
// that is not a host[:port], 421 for authorities this server does not
// serve, 404 agent_not_found on an agent host whose label is not a uid,
// else 404 not_found.
func (s *Server) notFound(_ http.ResponseWriter, r *http.Request) error {
	switch k, _ := s.classify(r); k {
	case hostInvalid:
		return middleware.Fail(middleware.CodeInvalidAuthority,
			"the Host %q is not a host[:port] authority", signer.Truncate(r.Host))
	case hostOther:
		return middleware.Fail(middleware.CodeMisdirectedRequest,
			"this server answers only for %s and its agent hosts (agent-….%s)", s.service.Host, s.service.Host)
	case hostAgentLabel:
		return middleware.Fail(CodeAgentNotFound,
			"the host does not name an agent (want agent-<24 hex>.%s)", s.service.Host)
	}
	return middleware.Fail(CodeNotFound, "no route for %s", r.URL.Path)
}

func (s *Server) methodNotAllowed(_ http.ResponseWriter, r *http.Request) error {
	return middleware.Fail(middleware.CodeMethodNotAllowed, "method %s is not allowed on %s", r.Method, r.URL.Path)
}

// byMethod dispatches on the request method; HEAD is served by the GET
// handler. Other methods get 405 method_not_allowed with an Allow header.
func (s *Server) byMethod(handlers methods) handler {
	if h, ok := handlers[http.MethodGet]; ok {
		if _, ok := handlers[http.MethodHead]; !ok {
			handlers[http.MethodHead] = h
		}
	}
	allowed := make([]string, 0, len(handlers))
	for m := range handlers {
		allowed = append(allowed, m)
	}
	sort.Strings(allowed)
	allow := strings.Join(allowed, ", ")
	return func(w http.ResponseWriter, r *http.Request) error {
		if h, ok := handlers[r.Method]; ok {
			return h(w, r)
		}
		w.Header().Set("Allow", allow)
		return s.methodNotAllowed(w, r)
	}
}

// dbUnavailable is the answer to any database failure: 503 with no detail.
func dbUnavailable(err error) *middleware.Error {
	return &middleware.Error{Code: middleware.CodeDatabaseUnavailable,
		Message: "the database is unavailable; try again later", Err: err}
}

func (s *Server) dbContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.DBTimeout)
}
