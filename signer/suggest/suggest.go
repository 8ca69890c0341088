// Package suggest is the one "did you mean" of the module, shared by
// idcli's flags and commands, the proxy's configuration file
// (proxyconfig) and the Caddyfile of the Caddy module (caddyagentid): it
// picks, among the names a program knows, the ones a user most likely
// meant by a name it does not. It imports nothing of the module.
package suggest

import "strings"

// Close returns the candidates a user most likely meant by typed: an
// exact match ignoring case (and - for _), else those within a small edit
// distance (one edit for short words, two otherwise; a swap of neighbours
// counts as one), else those that typed is a prefix of (two letters at
// least). It returns nil when none is close.
func Close(typed string, candidates []string) []string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	lower := norm(typed)
	for _, c := range candidates {
		if norm(c) == lower {
			return []string{c}
		}
	}
	limit := 2
	if len([]rune(typed)) <= 4 {
		limit = 1
	}
	best, bestD := []string(nil), limit+1
	for _, c := range candidates {
		if n := len([]rune(typed)) - len([]rune(c)); n > limit || -n > limit {
			continue // the distance is at least the difference in length
		}
		d := distance(lower, norm(c))
		switch {
		case d < bestD:
			best, bestD = []string{c}, d
		case d == bestD:
			best = append(best, c)
		}
	}
	if best != nil {
		return best
	}
	if len(typed) >= 2 {
		for _, c := range candidates {
			if strings.HasPrefix(norm(c), lower) {
				best = append(best, c)
			}
		}
	}
	return best
}

// distance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and swaps of neighbouring letters
// each count as one.
func distance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}
