package proxy

import (
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentid/agentid/middleware"
)

// DefaultMaxIdleConnsPerHost is how many idle upstream connections the
// default transport keeps: enough for a busy proxy to reuse its upstream
// connections instead of opening one per request.
const DefaultMaxIdleConnsPerHost = 256

// Metrics receives the proxy's counts; *metrics.Registry of the reference
// server satisfies it. Implementations must be safe for concurrent use.
// Verification outcomes are the verifier's to report, through its
// middleware.Config.OnResult hook.
type Metrics interface {
	// ObserveRequest counts one answer to a client.
	ObserveRequest(route, method string, status int)
}

// Config configures a proxy handler.
type Config struct {
	// Verifier checks every request; its Mode decides what is forwarded.
	// Required.
	Verifier *middleware.Verifier
	// Upstream is the service requests are forwarded to. Required unless
	// ForwardAuth is set; the two exclude each other.
	Upstream *url.URL
	// ForwardAuth, if set, makes the handler answer the auth subrequests
	// of that front proxy instead of forwarding: 200 with the X-Agent-*
	// headers when the original request may go on, else the refusal (the
	// JSON error body with Accept-Signature, repeated in X-Agent-Refusal;
	// for nginx, with its status in X-Agent-Refusal-Status, and answered
	// 403 when that status is neither 401 nor 403). For Caddy, a 200 carries
	// every X-Agent-* header, empty when it does not apply.
	// The original request is rebuilt from the front's headers only (see
	// Front); its RemoteAddr, which per-address limits read, is the client
	// address middleware/clientaddr reads in X-Forwarded-For, ForwardAuthFrom
	// being the trusted proxies (the front's own address if there is none).
	// Its path must be normal (middleware.CheckPath), else 400
	// invalid_request. Subrequests carry no body: a signature covering
	// content-digest cannot be checked this way and is refused
	// (invalid_signature_input; passed as invalid in Observe mode). A
	// forward-auth endpoint cannot remove headers from the original
	// request, so one carrying any X-Agent-* header (in any spelling) is
	// refused (forbidden), in every mode: the service would read them.
	ForwardAuth Front
	// ForwardAuthFrom lists the addresses whose subrequests are answered
	// (others get 403 forbidden), and whose X-Forwarded-For entries are
	// believed. If nil, loopback only (127.0.0.0/8, ::1).
	ForwardAuthFrom []netip.Prefix
	// Services are the base URLs of the agentid services whose agents get
	// X-Agent-Uid, such as "https://agentid.example": an identity gets a
	// uid only when it is exactly <scheme>://<uid>.<host> of one of them,
	// or that origin's root URL <scheme>://<uid>.<host>/ (the identity of
	// the strict-01 profile, the URL as fetched).
	// If nil, no request gets X-Agent-Uid.
	Services []string
	// Transport carries requests upstream. If nil,
	// newTransport(MaxIdleConnsPerHost), except that to an http://
	// upstream the requests without a body (an upgrade aside) are written
	// and their answers read on the request's own goroutine, on a pool of
	// connections of the same size, which costs less CPU per request.
	Transport http.RoundTripper
	// MaxIdleConnsPerHost sizes the default transport's pool of idle
	// upstream connections. If 0, DefaultMaxIdleConnsPerHost. Ignored when
	// Transport is set.
	MaxIdleConnsPerHost int
	// AccessLog, if set, gets one line per request: method, host, path
	// (of the original request in forward-auth), status, duration_ms,
	// outcome, verdict (Verdict), reason and code (the reason and error
	// code of Decide's refusal, else the verifier's), agent, kid, uid,
	// agent_name and agent_purpose (see AgentCard), when the upstream
	// failed, upstream_error and, under a span, trace_id.
	AccessLog *slog.Logger
	// Metrics, if set, counts answers.
	Metrics Metrics
	// Decide, if set, has the last word on each request the verifier let
	// through, before it is forwarded (in forward-auth, before the 200).
	// It returns nil to let the request go on, having possibly set headers
	// on w (such as rate-limit headers, sent with the answer), or writes a
	// refusal to w and returns its error: the access log line and Metrics
	// then record that refusal's status and code, so the one line of a
	// request tells what its client got. A refused request never reaches
	// the upstream. (*rules.Gate).Apply fits; run the verifier in Observe
	// mode so that every request reaches it. It must be safe for
	// concurrent use.
	Decide func(w http.ResponseWriter, r *http.Request, res *middleware.Result) *middleware.Error
	// OnRefuse, if set, hears of each request refused before the
	// verifier saw it (a path that is not normal, a forward-auth
	// subrequest it cannot answer), whose outcome the verifier's
	// Config.OnResult never gets: with both, a status page counts every
	// refusal. Decide reports its own refusals. It must be safe for
	// concurrent use.
	OnRefuse func(res *middleware.Result)
	// AgentCard, if set, names verified agents in the access log: given
	// the agent's key-set URL (middleware.Agent.DirectoryURL), it returns
	// the name and purpose its Signature Agent Card gives, "" for none
	// (logged as agent_name and agent_purpose when not empty).
	// (*keyfetch.Fetcher).AgentCard answers it without I/O. It must be safe
	// for concurrent use.
	AgentCard func(keySetURL string) (name, purpose string)
	// TracerProvider and MeterProvider, if set, give each request a
	// server span and the metric http.server.request.duration (package
	// middleware/telemetry), whose trace id the access log line then
	// carries as trace_id. If nil, the global providers, which record
	// nothing until the application sets them. The Verifier takes its own.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}
