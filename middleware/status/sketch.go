package status

import (
	"cmp"
	"slices"
)

// sketch is a space-saving top-N counter (Metwally, Agrawal and El Abbadi,
// 2005): k entries at most, whatever the number of agents. An agent not
// tracked replaces the entry with the smallest count and inherits that
// count as its possible overcount, so every agent with more than 1/k of
// the requests is tracked and its count is off by at most its error.
type sketch struct {
	k       int
	entries []sketchEntry
	index   map[string]int // id → position in entries; at most k keys
}

type sketchEntry struct {
	id       string
	keySet   string // the key-set URL it was first seen with
	count    uint64
	err      uint64
	verdicts [4]uint64 // exact since the entry was taken
}

func newSketch(k int) sketch {
	return sketch{k: k, index: make(map[string]int, k)}
}

// add counts one request of id (verified with the key set at keySet) with
// verdict vi.
func (s *sketch) add(id, keySet string, vi int) {
	if i, ok := s.index[id]; ok {
		if s.entries[i].keySet == "" {
			s.entries[i].keySet = keySet
		}
		s.entries[i].count++
		s.entries[i].verdicts[vi]++
		return
	}
	if len(s.entries) < s.k {
		s.index[id] = len(s.entries)
		e := sketchEntry{id: id, keySet: keySet, count: 1}
		e.verdicts[vi] = 1
		s.entries = append(s.entries, e)
		return
	}
	m := 0
	for i := range s.entries {
		if s.entries[i].count < s.entries[m].count {
			m = i
		}
	}
	delete(s.index, s.entries[m].id)
	min := s.entries[m].count
	e := sketchEntry{id: id, keySet: keySet, count: min + 1, err: min}
	e.verdicts[vi] = 1
	s.entries[m] = e
	s.index[id] = m
}

// top returns the n entries with the highest counts.
func (s *sketch) top(n int) []AgentCounts {
	out := make([]AgentCounts, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, AgentCounts{ID: e.id, KeySetURL: e.keySet, Requests: e.count, Error: e.err, VerdictCounts: countsOf(e.verdicts)})
	}
	slices.SortFunc(out, func(a, b AgentCounts) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.ID, b.ID))
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
