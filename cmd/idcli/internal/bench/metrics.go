package bench

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// serverMemory reads process_resident_memory_bytes and
// go_memstats_heap_alloc_bytes from the server's metrics (serverMetrics).
func (b *bench) serverMemory(ctx context.Context) (rss, heap int64) {
	rss, heap, _, _ = b.serverMetrics(ctx)
	return rss, heap
}

// serverMetrics reads the server's metrics at MetricsURL, if set and it
// answers: its resident memory and Go heap, and its key lookups answered
// from the cache or not (agentid_key_cache_total).
func (b *bench) serverMetrics(ctx context.Context) (rss, heap, keyHits, keyMisses int64) {
	if b.cfg.MetricsURL == "" {
		return 0, 0, 0, 0
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.MetricsURL, nil)
	if err != nil {
		return 0, 0, 0, 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, 0, 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		return 0, 0, 0, 0
	}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 4<<20))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			rss = int64(f)
		case "go_memstats_heap_alloc_bytes":
			heap = int64(f)
		case `agentid_key_cache_total{result="hit"}`:
			keyHits = int64(f)
		case `agentid_key_cache_total{result="miss"}`:
			keyMisses = int64(f)
		}
	}
	return rss, heap, keyHits, keyMisses
}
