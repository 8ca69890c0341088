package metrics_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/metrics"
)

// dashboardFile is the Grafana dashboard of the documentation.
const dashboardFile = "../../docs/grafana-dashboard.json"

var (
	// metricName finds the metric names of a PromQL expression: the
	// families this registry writes all start with one of these prefixes.
	metricName = regexp.MustCompile(`\b((?:agentid|go|process)_[a-zA-Z0-9_]+)\b(\{[^}]*\})?`)
	matcherKey = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	byClause   = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
	seriesLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
	labelKey   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
)

// dashboardSeries returns the label names of every series name the registry
// writes once each kind of observation has been made.
func dashboardSeries(t *testing.T) map[string]map[string]bool {
	t.Helper()
	reg := metrics.NewRegistry()
	reg.ObserveRequest("proxy", "GET", 200)
	reg.ObserveVerification("ok")
	reg.ObserveKeyCache(true)
	reg.ObserveDBQuery(time.Millisecond)
	var buf bytes.Buffer
	if _, err := reg.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, line := range strings.Split(buf.String(), "\n") {
		m := seriesLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		if out[m[1]] == nil {
			out[m[1]] = map[string]bool{}
		}
		for _, k := range labelKey.FindAllStringSubmatch(m[2], -1) {
			out[m[1]][k[1]] = true
		}
	}
	return out
}

// TestGrafanaDashboard: every query of docs/grafana-dashboard.json names
// metrics the registry writes, with labels those series carry.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	series := dashboardSeries(t)
	queries := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			names := metricName.FindAllStringSubmatch(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no metric", p.Title, q.Expr)
			}
			for _, n := range names {
				labels, ok := series[n[1]]
				if !ok {
					t.Errorf("panel %q: %s is not a metric the registry writes", p.Title, n[1])
					continue
				}
				for _, k := range matcherKey.FindAllStringSubmatch(n[2], -1) {
					if !labels[k[1]] {
						t.Errorf("panel %q: %s has no label %q", p.Title, n[1], k[1])
					}
				}
				for _, by := range byClause.FindAllStringSubmatch(q.Expr, -1) {
					for _, k := range strings.Split(by[1], ",") {
						if k = strings.TrimSpace(k); k != "" && !labels[k] {
							t.Errorf("panel %q: %s has no label %q (by clause)", p.Title, n[1], k)
						}
					}
				}
			}
		}
	}
	if queries < 8 {
		t.Errorf("%d queries, want the dashboard's panels to query at least 8", queries)
	}
}
