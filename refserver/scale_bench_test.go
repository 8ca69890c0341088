package refserver_test

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/metrics"
	"github.com/agentid/agentid/refserver"
	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/replaypg"
	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

var (
	scaleAgents   = flag.Int("scale.agents", 100_000, "BenchmarkScaleAgents: agents in the large database (the small one holds 1,000)")
	scaleRate     = flag.Float64("scale.rate", 200, "BenchmarkScaleAgents: requests per second of each open-loop run (one per database, both at once)")
	scaleDuration = flag.Duration("scale.duration", 5*time.Second, "BenchmarkScaleAgents: length of each open-loop run")
	scaleRounds   = flag.Int("scale.rounds", 4, "BenchmarkScaleAgents: rounds (each runs every target on both databases; which leads alternates)")
	scaleSigners  = flag.Int("scale.signers", 200, "BenchmarkScaleAgents: agents signing /whoami in each round (new ones every round)")
)

// scaleSmall is the number of agents of the baseline database.
const scaleSmall = 1000

// scaleDB is a server on a PostgreSQL database of n agents: the real
// agents (uids, in the order of the benchmark's keys) and n-len(uids)
// filler agents of seedFiller(…, seed, …).
type scaleDB struct {
	name string // "1k" or "large"
	n    int
	seed string
	uids []string
	e    *testEnv
}

// uid returns agent i of the n (real agents first).
func (s *scaleDB) uid(i int) string {
	if i < len(s.uids) {
		return s.uids[i]
	}
	return fillerUID(s.seed, i-len(s.uids))
}

// BenchmarkScaleAgents compares what clients see of a server on a
// PostgreSQL database of 1,000 agents and one of -scale.agents agents
// (100,000 unless set; 1,000,000 for the figure the docs give), both in
// the same run, both configured as `idcli server start --replay-store
// postgres` runs (keys, nonces and the change log in PostgreSQL; caches
// at their defaults; info-level request lines; metrics).
//
// Each round runs, on both databases at once (so the stalls of a shared
// machine fall on both; their schedules half an interval apart, which one
// leads alternating by round), an open loop of -scale.rate requests per second
// each for -scale.duration (latency measured from each request's
// scheduled send time over 64 keep-alive loopback connections) of two
// targets:
//   - dir: GET of the key directory on the agent host of an agent drawn
//     at random among all the database's agents (at the default rate
//     about 5% of them find the 250 ms directory cache warm on 1,000
//     agents, none on more);
//   - whoami: GET /whoami signed by -scale.signers real agents in turn,
//     new ones each round (so each of them costs one key lookup in the
//     database, then hits the key cache), every request with its own nonce.
//
// It reports the median over rounds of each p50 and p99 (ms), the ratios
// of the large database's to the small one's, per target, and how long
// seeding the large database took.
// Every answer must be 200. Run it with -benchtime 1x. With
// -scale.agents=1000 both databases are alike: the ratios then show the
// machine's noise.
func BenchmarkScaleAgents(b *testing.B) {
	large := *scaleAgents
	realAgents := 1 + *scaleRounds**scaleSigners // a warm-up agent, then the signers of each round
	if large < scaleSmall || realAgents > scaleSmall || *scaleSigners < 1 || *scaleRounds < 1 ||
		!(*scaleRate >= 1) || *scaleDuration < time.Second {
		b.Fatalf("want -scale.agents at least %d, -scale.rounds and -scale.signers at least 1 and their product below %d, -scale.rate at least 1 and -scale.duration at least 1s",
			scaleSmall, scaleSmall)
	}
	keys := make([]signer.PrivateKey, realAgents)
	for i := range keys {
		k, err := signer.GenerateKey(nil)
		if err != nil {
			b.Fatal(err)
		}
		keys[i] = k
	}
	small := newScaleDB(b, "1k", scaleSmall, keys)
	start := time.Now()
	big := newScaleDB(b, "large", large, keys)
	seeded := time.Since(start)

	type sample struct{ p50, p99 []float64 }
	results := map[string]*sample{}
	record := func(key string, res openLoopResult) {
		s := results[key]
		if s == nil {
			s = &sample{}
			results[key] = s
		}
		s.p50 = append(s.p50, res.percentile(0.50))
		s.p99 = append(s.p99, res.percentile(0.99))
	}
	n := int(*scaleRate * scaleDuration.Seconds())
	b.ResetTimer()
	for range b.N {
		for round := range *scaleRounds {
			signers := keys[1+round**scaleSigners : 1+(round+1)**scaleSigners]
			for _, target := range []string{"dir", "whoami"} {
				b.StopTimer()
				dbs := []*scaleDB{small, big}
				reqs := make([][][]byte, len(dbs))
				for i, s := range dbs {
					if target == "dir" {
						reqs[i] = s.directoryRequests(n)
					} else {
						reqs[i] = s.whoamiRequests(b, signers, 1+round**scaleSigners, n)
					}
					s.warm(b, keys[0])
				}
				b.StartTimer()
				// Both loops run at once, so the stalls of a shared
				// machine fall on both, their schedules half an interval
				// apart (else the later one's requests would always
				// queue behind the other's); which leads alternates.
				res := make([]openLoopResult, len(dbs))
				var wg sync.WaitGroup
				for k := range dbs {
					i := (k + round) % len(dbs)
					wg.Go(func() {
						time.Sleep(time.Duration(float64(k) * float64(time.Second) / *scaleRate / float64(len(dbs))))
						res[i] = openLoop(dbs[i].e, reqs[i], *scaleRate)
					})
				}
				wg.Wait()
				for i, s := range dbs {
					if r := res[i]; r.err != nil || r.errors > 0 {
						b.Fatalf("%s on %d agents: %d errors, the first: %v", target, s.n, r.errors, r.err)
					}
					b.Logf("round %d %s on %d agents (%s): p50 %.2f ms, p99 %.2f ms, %.0f req/s",
						round, target, s.n, s.name, res[i].percentile(0.5), res[i].percentile(0.99), res[i].rate)
					record(target+"-"+s.name, res[i])
				}
			}
		}
	}
	b.ReportMetric(seeded.Seconds(), "seed-large-s")
	for _, target := range []string{"dir", "whoami"} {
		sm, lg := results[target+"-1k"], results[target+"-large"]
		b.ReportMetric(median(sm.p50), target+"-1k-p50-ms")
		b.ReportMetric(median(sm.p99), target+"-1k-p99-ms")
		b.ReportMetric(median(lg.p50), target+"-large-p50-ms")
		b.ReportMetric(median(lg.p99), target+"-large-p99-ms")
		b.ReportMetric(median(lg.p50)/median(sm.p50), target+"-p50-ratio")
		b.ReportMetric(median(lg.p99)/median(sm.p99), target+"-p99-ratio")
	}
}

// newScaleDB builds a server on a fresh PostgreSQL schema holding an
// agent per key and filler agents up to n, ANALYZEd.
func newScaleDB(b *testing.B, name string, n int, keys []signer.PrivateKey) *scaleDB {
	b.Helper()
	db := dbtest.Migrated(b, dbtest.PostgresURL(b))
	s := &scaleDB{name: name, n: n, seed: dbtest.RandomHex(4)}
	s.uids = insertAgents(b, db, keys)
	seedFiller(b, db, s.seed, n-len(keys))
	replay, err := replaypg.New(replaypg.Config{DB: db})
	if err != nil {
		b.Fatal(err)
	}
	s.e = newTestEnvConfig(b, db, "", func(c *refserver.Config) {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.Metrics = metrics.NewRegistry()
		c.Replay = replay
	})
	var count int64
	if err := db.Model(&store.Agent{}).Count(&count).Error; err != nil || count != int64(n) {
		b.Fatalf("database holds %d agents (%v), want %d", count, err, n)
	}
	return s
}

// directoryRequests returns n serialized directory GETs, each on the
// agent host of an agent drawn at random among s's.
func (s *scaleDB) directoryRequests(n int) [][]byte {
	reqs := make([][]byte, n)
	for i := range reqs {
		reqs[i] = fmt.Appendf(nil, "GET /.well-known/http-message-signatures-directory HTTP/1.1\r\nHost: %s.%s\r\n\r\n",
			s.uid(rand.IntN(s.n)), s.e.host)
	}
	return reqs
}

// whoamiRequests returns n serialized GET /whoami, request i signed by
// signers[i%len(signers)], agent first+i%len(signers) of s, each with its
// own nonce.
func (s *scaleDB) whoamiRequests(b *testing.B, signers []signer.PrivateKey, first, n int) [][]byte {
	b.Helper()
	reqs := make([][]byte, n)
	for i := range reqs {
		j := i % len(signers)
		h, err := signer.Headers("GET", s.e.base+"/whoami", signers[j], signer.Options{SignatureAgent: s.e.origin(s.uids[first+j])})
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = fmt.Appendf(nil, "GET /whoami HTTP/1.1\r\nHost: %s\r\nSignature: %s\r\nSignature-Input: %s\r\nSignature-Agent: %s\r\n\r\n",
			s.e.host, h.Signature, h.SignatureInput, h.SignatureAgent)
	}
	return reqs
}

// warm sends a few requests signed by key (agent 0 of s) so the key
// source's change-log reader runs (it stops after 5 s without lookups)
// and connections are open, then waits for the reader's first read.
func (s *scaleDB) warm(b *testing.B, key signer.PrivateKey) {
	b.Helper()
	reqs := s.whoamiRequests(b, []signer.PrivateKey{key}, 0, 64)
	if res := openLoop(s.e, reqs, 1000); res.err != nil {
		b.Fatalf("warm-up on %d agents: %v", s.n, res.err)
	}
	time.Sleep(300 * time.Millisecond)
}

// median returns the median of xs.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
