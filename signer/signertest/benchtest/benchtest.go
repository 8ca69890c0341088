// Package benchtest is the benchmark machinery the packages' benchmarks
// share: two paths timed in the same run, interleaved, and the CPU time of
// the process or of the calling thread.
//
//	benchtest.Paired(b, 64, "ed25519", "verify", baseline, measured)
//	cpu := benchtest.ProcessCPU()
package benchtest

import (
	"runtime"
	"testing"
	"time"
)

// depths is the number of stack depths Paired spreads its calls over.
const depths = 16

// atDepth calls f(i) n frames deeper than its caller. The speed of some
// code (curve25519-voi's vector code among it) depends on where its stack
// frames fall relative to the data it reads: measured at one stack depth,
// a path can look markedly faster or slower than it is on average, as it
// runs in a server's many goroutines (docs/benchmarks.md). Spreading the calls over several
// depths measures the average.
//
//go:noinline
func atDepth(n int, f func(int), i int) {
	var pad [64]byte
	if n > 0 {
		atDepth(n-1, f, i)
	} else {
		f(i)
	}
	runtime.KeepAlive(&pad)
}

// Paired times baseline(i) and measured(i) for i in [0, b.N), in
// alternating blocks of block iterations (1 alternates every iteration), and
// reports both costs as <baseName>-ns/op and <name>-ns/op and their ratio,
// measured over baseline, as x-<baseName>. Timing both in the same run,
// interleaved, keeps the ratio meaningful on a machine whose load changes
// during the run. On Linux it also reports the ratio of the CPU time the
// benchmark's thread spent in each (cpu-x-<baseName>), which time stolen by
// other processes or a hypervisor does not distort.
func Paired(b *testing.B, block int, baseName, name string, baseline, measured func(i int)) {
	b.Helper()
	PairedPrepared(b, block, baseName, name, nil, baseline, measured)
}

// PairedPrepared is Paired calling prepare(start, end), outside the timed
// sections, before each block of iterations [start, end): a benchmark of a
// server's path prepares the block's requests there, so that they are as
// fresh in the caches as a request the server has just read.
func PairedPrepared(b *testing.B, block int, baseName, name string, prepare func(start, end int), baseline, measured func(i int)) {
	b.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var base, meas, baseCPU, measCPU time.Duration
	b.ResetTimer()
	for start := 0; start < b.N; start += block {
		end := min(start+block, b.N)
		if prepare != nil {
			prepare(start, end)
		}
		c0, t0 := ThreadCPU(), time.Now()
		for i := start; i < end; i++ {
			atDepth(i%depths, baseline, i)
		}
		c1, t1 := ThreadCPU(), time.Now()
		for i := start; i < end; i++ {
			atDepth(i%depths, measured, i)
		}
		c2, t2 := ThreadCPU(), time.Now()
		base += t1.Sub(t0)
		meas += t2.Sub(t1)
		baseCPU += c1 - c0
		measCPU += c2 - c1
	}
	b.StopTimer()
	b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), baseName+"-ns/op")
	b.ReportMetric(float64(meas.Nanoseconds())/float64(b.N), name+"-ns/op")
	b.ReportMetric(float64(meas)/float64(base), "x-"+baseName)
	if baseCPU > 0 {
		b.ReportMetric(float64(measCPU)/float64(baseCPU), "cpu-x-"+baseName)
	}
}
