package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/signer/agent"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// Tuning of the demo's third-party API: its key cache is short-lived so the
// rotation shows up in seconds rather than minutes.
const (
	demoRefreshCooldown = 200 * time.Millisecond
	demoMinTTL          = time.Second
	demoMaxTTL          = 5 * time.Second
	// demoRefreshWait bounds how long the demo waits for the third-party
	// API to learn the new key.
	demoRefreshWait = 5 * time.Second
	demoHTTPTimeout = 10 * time.Second
	// demoShutdownTimeout bounds the reference server's graceful stop.
	demoShutdownTimeout = 5 * time.Second
)

// newDemoCmd is `idcli demo`: the main job, end to end, on loopback with the
// embedded database, leaving nothing behind.
func newDemoCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli demo", env)
	verbose := fs.Bool("verbose", false, "also print the server's request log and the third-party API's key fetches (to stderr)")
	return &ffcli.Command{
		Name:       "demo",
		ShortUsage: "idcli demo [--verbose]",
		ShortHelp:  "run agentid end to end on loopback (embedded database, no setup, nothing left behind)",
		LongHelp: "Starts the reference server on a free loopback port with an embedded SQLite\n" +
			"database in a temporary folder, creates an agent, calls /whoami signed, starts\n" +
			"a third-party API that verifies the agent through its key directory, rotates\n" +
			"the key, shows the old key refused and the new one accepted, and a replayed\n" +
			"request refused. Prints one ✔ line per step and exits non-zero if any step\n" +
			"misbehaves. Everything is removed afterwards. The temporary folder is created\n" +
			"under TMPDIR (default: the system's temporary directory).",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if err := noArgs("demo", args); err != nil {
				return err
			}
			return runDemo(ctx, env, *verbose)
		},
	}
}

// demo is the state of one demo run.
type demo struct {
	env     *cliEnv
	verbose bool
	log     *slog.Logger // server and third-party logs; discarded unless verbose

	tmp       string          // temporary folder holding the database and the agent's .env
	stop      func()          // stops the reference server and waits for it; nil before it runs
	servers   []*http.Server  // the third-party API
	transport *http.Transport // the transport of the demo's own requests (loopback, no proxy)
	client    *http.Client    // unsigned client (registration, rotation)

	serverURL string // HOSTNAME of the reference server, http://localhost:PORT
	apiURL    string // the third-party API's base URL, http://localhost:PORT
	agentDir  string // the agent's folder (holds .env)

	uid     string
	oldCred agent.Credentials // the agent's first key
	newCred agent.Credentials // the key after rotation
}

// noEnv is the demo's process environment: empty, so AGENT_* variables of
// the user's shell never leak into (or get overwritten by) the demo agent.
func noEnv(string) string { return "" }

// runDemo runs every step, stopping at the first that misbehaves, then
// cleans up. It returns nil only if every step (and the clean-up) behaved.
func runDemo(ctx context.Context, env *cliEnv, verbose bool) error {
	start := time.Now()
	d := &demo{env: env, verbose: verbose, log: slog.New(slog.DiscardHandler)}
	if verbose {
		d.log = slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// The demo's own requests go to http://localhost:PORT, which the
	// system resolver knows; the third-party API's key fetches go to
	// http://<uid>.localhost:PORT, which keyfetch resolves itself.
	d.transport = &http.Transport{
		Proxy:               nil, // loopback only: never through HTTP_PROXY
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	d.client = &http.Client{Transport: d.transport, Timeout: demoHTTPTimeout}

	steps := []struct {
		name string
		run  func(context.Context) (string, error)
	}{
		{"server start", d.startServer},
		{"agent creation", d.createAgent},
		{"/whoami", d.whoami},
		{"third-party API", d.thirdParty},
		{"key rotation", d.rotate},
		{"old key at the server", d.oldKeyAtServer},
		{"new key at the server", d.newKeyAtServer},
		{"third-party API refresh", d.thirdPartyRefresh},
		{"replay", d.replay},
	}
	ok := true
	for _, s := range steps {
		line, err := s.run(ctx)
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("interrupted (%w)", ctx.Err())
			}
			fmt.Fprintf(env.Stdout, "✘ %s: %v\n", s.name, err)
			ok = false
			break
		}
		fmt.Fprintf(env.Stdout, "✔ %s\n", line)
	}
	if err := d.cleanup(ctx); err != nil {
		fmt.Fprintf(env.Stdout, "✘ clean-up: %v\n", err)
		ok = false
	} else {
		fmt.Fprintln(env.Stdout, "✔ servers stopped, temporary folder removed")
	}
	if !ok {
		if ctx.Err() != nil {
			return exitCode(130)
		}
		return exitCode(1)
	}
	fmt.Fprintf(env.Stdout, "demo complete in %.1fs\n", time.Since(start).Seconds())
	return nil
}

// listen opens a free loopback port; its URL is http://localhost:PORT.
func (d *demo) listen() (net.Listener, string, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("cannot listen on loopback: %w", err)
	}
	return ln, fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port), nil
}

// serve serves h on ln until cleanup.
func (d *demo) serve(ln net.Listener, h http.Handler) {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
	d.servers = append(d.servers, hs)
	go hs.Serve(ln)
}

// startServer is step 1: the reference server on a migrated embedded
// database in a new temporary folder, built by refserver.Open as
// `idcli server start` builds it.
func (d *demo) startServer(ctx context.Context) (string, error) {
	tmp, err := os.MkdirTemp(d.env.Getenv("TMPDIR"), "agentid-demo-")
	if err != nil {
		return "", fmt.Errorf("cannot create a temporary folder: %w", err)
	}
	d.tmp = tmp
	ln, _, err := d.listen()
	if err != nil {
		return "", err
	}
	var migrations io.Writer // the migration lines only with --verbose
	if d.verbose {
		migrations = d.env.Stderr
	}
	in, err := refserver.Open(ctx, refserver.Options{
		DatabaseURL:     "sqlite://" + filepath.Join(tmp, "agentid.db"),
		Listener:        ln, // HOSTNAME: http://localhost:<its port>
		Migrate:         true,
		MigrationLog:    migrations,
		Logger:          d.log.With("component", "server"),
		ShutdownTimeout: demoShutdownTimeout,
	})
	if err != nil {
		return "", cliDBError(err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- in.Serve(sctx) }()
	d.stop = func() { cancel(); <-served }
	d.serverURL = in.URL

	r, err := d.send(ctx, d.client, http.MethodGet, in.URL+"/", nil)
	if err != nil {
		return "", err
	}
	if r.Status != http.StatusOK {
		return "", fmt.Errorf("health check GET %s/ answered %s, want 200", in.URL, r)
	}
	return fmt.Sprintf("server started on %s (embedded database)", in.URL), nil
}

// createAgent is step 2: agent.Init in a temporary folder.
func (d *demo) createAgent(ctx context.Context) (string, error) {
	d.agentDir = filepath.Join(d.tmp, "agent")
	if err := os.Mkdir(d.agentDir, 0o700); err != nil {
		return "", err
	}
	res, err := agent.Init(ctx, agent.InitOptions{
		Dir:        d.agentDir,
		Hostname:   d.serverURL,
		HTTPClient: d.client,
		Getenv:     noEnv,
	})
	if err != nil {
		return "", err
	}
	if !res.IsNew {
		return "", fmt.Errorf("the server reported agent %s as already existing, want a new agent", res.UID)
	}
	creds, err := agent.Load(agent.LoadOptions{Dir: d.agentDir, Getenv: noEnv})
	if err != nil {
		return "", err
	}
	if creds.UID != res.UID || creds.Key.KeyID() != res.PublicJWK.Kid {
		return "", fmt.Errorf("the credentials file holds %s, want %s (kid %s)", creds, res.UID, res.PublicJWK.Kid)
	}
	d.uid, d.oldCred = res.UID, creds
	return fmt.Sprintf("agent created %s (kid %s, credentials in %s)", res.UID, res.PublicJWK.Kid, res.Path), nil
}

// whoami is step 3: GET /whoami signed by the agent.
func (d *demo) whoami(ctx context.Context) (string, error) {
	r, err := d.expect(ctx, d.oldCred, d.serverURL+"/whoami", http.StatusOK, d.oldCred.Key.KeyID())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("/whoami %d %s (kid %s)", r.Status, r.UID, r.Kid), nil
}

// thirdParty is step 4: a separate API, protected by the verification
// middleware, that learns the agent's keys only by fetching its key
// directory from the server over HTTP.
func (d *demo) thirdParty(ctx context.Context) (string, error) {
	keys := keyfetch.New(keyfetch.Config{
		TrustedHosts: []string{"*.localhost:*"},
		// AllowHTTP and AllowPrivateNetworks are on only because this demo
		// runs on plain HTTP over loopback; with AllowPrivateNetworks,
		// keyfetch resolves http://<uid>.localhost:PORT to loopback itself
		// (RFC 6761), as it does for anyone developing locally. A real
		// deployment trusts its agents' https:// hosts and leaves both off.
		AllowHTTP:            true,
		AllowPrivateNetworks: true,
		// A short cache so the rotation shows up in seconds: an unknown
		// keyid forces a refresh at most every 200 ms, and keys are kept
		// at most 5 s whatever the directory's max-age says.
		RefreshCooldown: demoRefreshCooldown,
		MinTTL:          demoMinTTL,
		MaxTTL:          demoMaxTTL,
		Logger:          d.log.With("component", "third-party"),
	})
	ln, url, err := d.listen()
	if err != nil {
		return "", err
	}
	// The API answers for localhost:PORT only: a signature the agent made
	// for another site is refused here (421 misdirected_request).
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{strings.TrimPrefix(url, "http://")},
		Logger: d.log.With("component", "third-party")})
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /hello", v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := middleware.AgentFrom(r.Context())
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{
			"message":       "hello, " + a.UID,
			"uid":           a.UID,
			"kid":           a.KeyID,
			"directory_url": a.DirectoryURL,
		})
	})))
	d.serve(ln, mux)
	d.apiURL = url
	r, err := d.expect(ctx, d.oldCred, d.apiURL+"/hello", http.StatusOK, d.oldCred.Key.KeyID())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("third-party API on %s verified %s via its key directory (%d, kid %s)", d.apiURL, r.UID, r.Status, r.Kid), nil
}

// rotate is step 5: agent.Rotate replaces the key; the uid stays.
func (d *demo) rotate(ctx context.Context) (string, error) {
	res, err := agent.Rotate(ctx, agent.RotateOptions{Dir: d.agentDir, HTTPClient: d.client, Getenv: noEnv})
	if err != nil {
		return "", err
	}
	if res.UID != d.uid {
		return "", fmt.Errorf("rotation answered for %s, want %s", res.UID, d.uid)
	}
	creds, err := agent.Load(agent.LoadOptions{Dir: d.agentDir, Getenv: noEnv})
	if err != nil {
		return "", err
	}
	if creds.Key.KeyID() != res.PublicJWK.Kid || creds.Key.KeyID() == d.oldCred.Key.KeyID() {
		return "", fmt.Errorf("the credentials file holds kid %s after rotation, want the new kid %s", creds.Key.KeyID(), res.PublicJWK.Kid)
	}
	d.newCred = creds
	return fmt.Sprintf("keys rotated (new kid %s)", res.PublicJWK.Kid), nil
}

// oldKeyAtServer is step 6a: the server refuses the old key at once.
func (d *demo) oldKeyAtServer(ctx context.Context) (string, error) {
	r, err := d.call(ctx, d.oldCred, d.serverURL+"/whoami")
	if err != nil {
		return "", err
	}
	if r.Status != http.StatusUnauthorized || (r.Code != string(middleware.CodeRevokedKey) && r.Code != string(middleware.CodeUnknownKey)) {
		return "", fmt.Errorf("GET /whoami with the old key answered %s, want 401 revoked_key", r)
	}
	return fmt.Sprintf("old key rejected by the server (%d %s)", r.Status, r.Code), nil
}

// newKeyAtServer is step 6b: the server accepts the new key at once.
func (d *demo) newKeyAtServer(ctx context.Context) (string, error) {
	r, err := d.expect(ctx, d.newCred, d.serverURL+"/whoami", http.StatusOK, d.newCred.Key.KeyID())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("new key accepted by the server (%d, kid %s)", r.Status, r.Kid), nil
}

// thirdPartyRefresh is step 6c: the third-party API still holds the old
// directory; the unknown new kid makes it refetch (at most once per
// cooldown), after which the new key verifies and the old one is unknown.
func (d *demo) thirdPartyRefresh(ctx context.Context) (string, error) {
	url := d.apiURL + "/hello"
	deadline := time.Now().Add(demoRefreshWait)
	var r demoReply
	for {
		var err error
		if r, err = d.call(ctx, d.newCred, url); err != nil {
			return "", err
		}
		if r.Status != http.StatusUnauthorized || r.Code != string(middleware.CodeUnknownKey) || time.Now().After(deadline) {
			break
		}
		// Refreshed too recently: wait out the cooldown.
		select {
		case <-time.After(demoRefreshCooldown):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if r.Status != http.StatusOK || r.UID != d.uid || r.Kid != d.newCred.Key.KeyID() {
		return "", fmt.Errorf("the new key answered %s, want 200 for %s with kid %s", r, d.uid, d.newCred.Key.KeyID())
	}
	old, err := d.call(ctx, d.oldCred, url)
	if err != nil {
		return "", err
	}
	if old.Status != http.StatusUnauthorized || old.Code != string(middleware.CodeUnknownKey) {
		return "", fmt.Errorf("the old key answered %s after the refresh, want 401 unknown_key", old)
	}
	return fmt.Sprintf("third-party API refreshed: new key %d, old key %d %s", r.Status, old.Status, old.Code), nil
}

// replay is step 7: one signed request captured and sent twice with
// identical headers, to the server and to the third-party API. The first
// copy is accepted, the second refused.
func (d *demo) replay(ctx context.Context) (string, error) {
	for _, target := range []struct{ name, url string }{
		{"the server", d.serverURL + "/whoami"},
		{"the third-party API", d.apiURL + "/hello"},
	} {
		h, err := agent.Headers(http.MethodGet, target.url, d.newCred, "", "")
		if err != nil {
			return "", err
		}
		captured := http.Header{}
		captured.Set("Signature", h.Signature)
		captured.Set("Signature-Input", h.SignatureInput)
		captured.Set("Signature-Agent", h.SignatureAgent)
		first, err := d.send(ctx, d.client, http.MethodGet, target.url, captured)
		if err != nil {
			return "", err
		}
		if first.Status != http.StatusOK {
			return "", fmt.Errorf("the original request to %s answered %s, want 200", target.name, first)
		}
		again, err := d.send(ctx, d.client, http.MethodGet, target.url, captured)
		if err != nil {
			return "", err
		}
		if again.Status != http.StatusUnauthorized || again.Code != string(middleware.CodeReplayedNonce) {
			return "", fmt.Errorf("the replayed request to %s answered %s, want 401 replayed_nonce", target.name, again)
		}
	}
	return "replayed request rejected by the server and the third-party API (401 replayed_nonce)", nil
}

// cleanup is step 8: stop both servers, close the database and remove the
// temporary folder. It runs whatever happened before, even after ctx is
// cancelled.
func (d *demo) cleanup(ctx context.Context) error {
	var errs []error
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, hs := range d.servers {
		if err := hs.Shutdown(sctx); err != nil {
			hs.Close()
			errs = append(errs, fmt.Errorf("stop server: %w", err))
		}
	}
	if d.stop != nil {
		d.stop() // the reference server, then its database
	}
	d.transport.CloseIdleConnections()
	if d.tmp != "" {
		if err := os.RemoveAll(d.tmp); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d.tmp, err))
		}
	}
	return errors.Join(errs...)
}
