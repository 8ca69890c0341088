package main

// Scale-out and fault tests: two server instances sharing one
// database and replay store, and PostgreSQL going away under load. The
// servers run in-process on loopback; PostgreSQL is reached through a TCP
// proxy the test can stop, so the shared PostgreSQL is never touched.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// scaleHostname is the HOSTNAME every instance shares (as behind one load
// balancer); each instance's client dials that instance's address.
const scaleHostname = "http://agentid.test"

// newScaleInstance starts a reference server on databaseURL with the
// database replay store, as `idcli server start --replay-store postgres`
// would; configure, if set, adjusts its refserver.Config.
func newScaleInstance(t *testing.T, databaseURL string, configure func(*refserver.Config)) *clitest.Server {
	t.Helper()
	return clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: databaseURL, Hostname: scaleHostname,
		ReplayStore: refserver.ReplayDatabase, Configure: configure})
}

func TestScaleTwoInstancesShareReplayAndKeys(t *testing.T) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			u := b.URL(t)
			// Separate connection pools, as separate processes would have.
			a := newScaleInstance(t, u, nil)
			bb := newScaleInstance(t, u, nil)

			key := signertest.Key(71)
			reg := clitest.MustSend(t, a.Client, clitest.RegisterRequest(t, scaleHostname, key))
			if reg.Status != http.StatusCreated {
				t.Fatalf("register via A: status = %d (%s), want 201", reg.Status, reg.Code)
			}
			uid := reg.UID

			t.Run("nonce accepted by one is replayed on the other", func(t *testing.T) {
				for _, order := range []struct {
					name        string
					first, then *clitest.Server
				}{{"A then B", a, bb}, {"B then A", bb, a}} {
					req := clitest.WhoamiRequest(t, scaleHostname, uid, key)
					if got := clitest.MustSend(t, order.first.Client, clitest.CopyRequest(req, nil)); got.Status != http.StatusOK {
						t.Fatalf("%s: first: status = %d (%s), want 200", order.name, got.Status, got.Code)
					}
					got := clitest.MustSend(t, order.then.Client, clitest.CopyRequest(req, nil))
					if got.Status != http.StatusUnauthorized || got.Code != "replayed_nonce" {
						t.Errorf("%s: replay: status = %d code %q, want 401 replayed_nonce", order.name, got.Status, got.Code)
					}
				}
			})

			t.Run("key rotated through A is refused by B within 1 s", func(t *testing.T) {
				next := signertest.Key(72)
				// B accepts the current key before the rotation.
				if got := clitest.MustSend(t, bb.Client, clitest.WhoamiRequest(t, scaleHostname, uid, key)); got.Status != http.StatusOK {
					t.Fatalf("B before rotation: status = %d (%s), want 200", got.Status, got.Code)
				}
				if got := clitest.MustSend(t, a.Client, clitest.RotateRequest(t, scaleHostname, uid, key, next)); got.Status != http.StatusOK {
					t.Fatalf("rotate via A: status = %d (%s), want 200", got.Status, got.Code)
				}
				rotated := time.Now()
				for {
					got := clitest.MustSend(t, bb.Client, clitest.WhoamiRequest(t, scaleHostname, uid, key))
					if got.Status == http.StatusUnauthorized && (got.Code == "revoked_key" || got.Code == "unknown_key") {
						t.Logf("old key refused by B %v after the rotation committed (%s)", time.Since(rotated), got.Code)
						break
					}
					if got.Status != http.StatusOK {
						t.Fatalf("B with the old key: status = %d code %q, want 401 revoked_key", got.Status, got.Code)
					}
					if time.Since(rotated) > time.Second {
						t.Fatalf("B still accepts the old key %v after the rotation", time.Since(rotated))
					}
					time.Sleep(20 * time.Millisecond)
				}
				if got := clitest.MustSend(t, bb.Client, clitest.WhoamiRequest(t, scaleHostname, uid, next)); got.Status != http.StatusOK {
					t.Errorf("B with the new key: status = %d (%s), want 200", got.Status, got.Code)
				}
			})
		})
	}
}

// scaleResult is one request of the load run.
type scaleResult struct {
	target     string
	start, end time.Time
	status     int
	uid        string
	err        error
}

func TestScalePostgresStoppedUnderLoad(t *testing.T) {
	direct := dbtest.PostgresURL(t) // skips without AGENTID_TEST_DATABASE_URL
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	proxy := clitest.NewTCPProxy(t, u.Host)
	u.Host = proxy.Addr()

	const dbTimeout = 2 * time.Second
	inst := newScaleInstance(t, u.String(), func(c *refserver.Config) { c.DBTimeout = dbTimeout })
	// check reads the database directly, around the proxy.
	check := clitest.StartServer(t, clitest.ServerOptions{DatabaseURL: direct, Hostname: scaleHostname})
	key := signertest.Key(81)
	reg := clitest.MustSend(t, inst.Client, clitest.RegisterRequest(t, scaleHostname, key))
	if reg.Status != http.StatusCreated {
		t.Fatalf("register: status = %d (%s), want 201", reg.Status, reg.Code)
	}
	uid := reg.UID

	var (
		mu      sync.Mutex
		results []scaleResult
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var req *http.Request
				target := "whoami"
				if (w+i)%2 == 0 {
					target = "register"
					k, err := signer.GenerateKey(rand.Reader)
					if err != nil {
						panic(err)
					}
					req = clitest.RegisterRequest(t, scaleHostname, k)
				} else {
					req = clitest.WhoamiRequest(t, scaleHostname, uid, key)
				}
				r := scaleResult{target: target, start: time.Now()}
				a, err := clitest.Send(inst.Client, req)
				r.end, r.status, r.uid, r.err = time.Now(), a.Status, a.UID, err
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}

	time.Sleep(700 * time.Millisecond)
	down := time.Now()
	proxy.Stop()
	time.Sleep(1500 * time.Millisecond)
	up := time.Now()
	if err := proxy.Start(); err != nil {
		t.Fatalf("restart the proxy: %v", err)
	}
	time.Sleep(3 * time.Second)
	cancel()
	wg.Wait()

	sort.Slice(results, func(i, j int) bool { return results[i].start.Before(results[j].start) })
	var (
		maxLatency       time.Duration
		whileDown503     int
		recovered        = up // every request started at or after this succeeded
		successAfter     = map[string]int{}
		registered       []string
		statusesWhenDown = map[int]int{}
	)
	for _, r := range results {
		maxLatency = max(maxLatency, r.end.Sub(r.start))
		if r.err != nil {
			t.Errorf("%s at %v: transport error (crash or hang?): %v", r.target, r.start.Sub(down), r.err)
			continue
		}
		ok := r.status == http.StatusOK || r.status == http.StatusCreated
		if !ok && r.status != http.StatusServiceUnavailable {
			t.Errorf("%s at %v: status %d, want 2xx or 503", r.target, r.start.Sub(down), r.status)
		}
		if r.target == "register" && ok {
			registered = append(registered, r.uid)
		}
		// Requests wholly inside the outage (after pooled connections have
		// been found dead) cannot have succeeded.
		if r.start.After(down.Add(200*time.Millisecond)) && r.end.Before(up) {
			statusesWhenDown[r.status]++
			if r.status == http.StatusServiceUnavailable {
				whileDown503++
			}
		}
		if !r.start.Before(up) && !ok && r.end.After(recovered) {
			recovered = r.end
		}
	}
	for _, r := range results {
		if r.err == nil && r.start.After(recovered) && (r.status == http.StatusOK || r.status == http.StatusCreated) {
			successAfter[r.target]++
		}
	}
	t.Logf("%d requests; max latency %v; while down: %v; full service %v after PostgreSQL returned; %d registrations got 2xx",
		len(results), maxLatency, statusesWhenDown, recovered.Sub(up), len(registered))

	if whileDown503 == 0 {
		t.Errorf("no 503 while PostgreSQL was down (statuses %v)", statusesWhenDown)
	}
	for s, n := range statusesWhenDown {
		if s != http.StatusServiceUnavailable {
			t.Errorf("%d answers %d while PostgreSQL was down, want only 503", n, s)
		}
	}
	if maxLatency > dbTimeout+2*time.Second {
		t.Errorf("slowest request took %v, want at most the %v database timeout plus 2 s", maxLatency, dbTimeout)
	}
	if d := recovered.Sub(up); d > 2*time.Second {
		t.Errorf("full service %v after PostgreSQL returned, want within 2 s", d)
	}
	for _, target := range []string{"whoami", "register"} {
		if successAfter[target] == 0 {
			t.Errorf("no successful %s after recovery", target)
		}
	}

	// Every registration answered 2xx is in the database, with its one
	// active key: its key directory, served from the database directly (not
	// through the proxy), lists exactly one key.
	for _, uid := range registered {
		resp, err := check.Client.Get(check.WellKnownURL(uid))
		if err != nil {
			t.Fatal(err)
		}
		var dir struct {
			Keys []json.RawMessage `json:"keys"`
		}
		err = json.NewDecoder(resp.Body).Decode(&dir)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || len(dir.Keys) != 1 {
			t.Errorf("agent %s registered with 2xx: directory answered %d with %d keys (%v), want 200 with 1 key", uid, resp.StatusCode, len(dir.Keys), err)
		}
	}
}
