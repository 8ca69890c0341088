package status

import (
	"bytes"
	"html/template"
	"io"
	"time"
)

// Chart geometry, in SVG user units.
const (
	chartWidth  = 720
	chartHeight = 180
	barWidth    = chartWidth / Minutes
)

// bar is one minute of the chart, stacked bottom-up: verified,
// not-present, unverified, invalid.
type bar struct {
	MinuteCounts
	X      float64
	YV, HV float64
	YN, HN float64
	YU, HU float64
	YI, HI float64
	Label  string
}

type view struct {
	Snapshot
	Bars  []bar
	Max   uint64
	Width int
	H     int
	BarW  float64
}

func (s Snapshot) view() view {
	v := view{Snapshot: s, Width: chartWidth, H: chartHeight, BarW: barWidth - 2}
	for _, m := range s.Minutes {
		v.Max = max(v.Max, m.Total())
	}
	scale := 0.0
	if v.Max > 0 {
		scale = float64(chartHeight) / float64(v.Max)
	}
	for i, m := range s.Minutes {
		b := bar{MinuteCounts: m, X: float64(i*barWidth) + 1, Label: m.Start.Format("15:04")}
		b.HV = float64(m.Verified) * scale
		b.HN = float64(m.NotPresent) * scale
		b.HU = float64(m.Unverified) * scale
		b.HI = float64(m.Invalid) * scale
		b.YV = chartHeight - b.HV
		b.YN = b.YV - b.HN
		b.YU = b.YN - b.HU
		b.YI = b.YU - b.HI
		v.Bars = append(v.Bars, b)
	}
	return v
}

var page = template.Must(template.New("status").Funcs(template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format(time.RFC3339)
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>{{.Title}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1d1d1f;background:#fafafa}
h1{font-size:1.4rem;margin:0 0 .2rem}
h2{font-size:1.05rem;margin:1.4rem 0 .4rem}
.meta{color:#666;margin:0 0 1rem}
.cards{display:flex;gap:.8rem;flex-wrap:wrap}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.5rem .9rem;min-width:8rem}
.card b{display:block;font-size:1.4rem}
table{border-collapse:collapse;background:#fff;min-width:32rem}
th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
svg{background:#fff;border:1px solid #ddd;border-radius:6px}
.v{fill:#2e7d32}.n{fill:#bdbdbd}.u{fill:#f9a825}.i{fill:#c62828}
.legend span{display:inline-block;width:.8rem;height:.8rem;margin:0 .3rem 0 .9rem;vertical-align:middle}
.ok{color:#2e7d32}.bad{color:#c62828}
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="meta">As of {{ts .Now}}; counting since {{ts .Since}}.</p>
<div class="cards" id="totals">
<div class="card">Last hour<b id="hour-total" data-count="{{.Hour.Total}}">{{.Hour.Total}}</b></div>
<div class="card">Verified<b id="hour-verified" data-count="{{.Hour.Verified}}">{{.Hour.Verified}}</b></div>
<div class="card">Not present<b id="hour-not-present" data-count="{{.Hour.NotPresent}}">{{.Hour.NotPresent}}</b></div>
<div class="card">Unverified<b id="hour-unverified" data-count="{{.Hour.Unverified}}">{{.Hour.Unverified}}</b></div>
<div class="card">Invalid<b id="hour-invalid" data-count="{{.Hour.Invalid}}">{{.Hour.Invalid}}</b></div>
</div>

<h2>Outcomes per minute, last hour</h2>
<svg id="chart" role="img" aria-label="outcomes per minute" width="{{.Width}}" height="{{.H}}" viewBox="0 0 {{.Width}} {{.H}}">
{{- range .Bars}}
<g class="minute" data-minute="{{.Label}}" data-verified="{{.Verified}}" data-not-present="{{.NotPresent}}" data-unverified="{{.Unverified}}" data-invalid="{{.Invalid}}"><title>{{.Label}}: {{.Verified}} verified, {{.NotPresent}} not-present, {{.Unverified}} unverified, {{.Invalid}} invalid</title>
{{- if .HV}}<rect class="v" x="{{.X}}" y="{{.YV}}" width="{{$.BarW}}" height="{{.HV}}"/>{{end -}}
{{- if .HN}}<rect class="n" x="{{.X}}" y="{{.YN}}" width="{{$.BarW}}" height="{{.HN}}"/>{{end -}}
{{- if .HU}}<rect class="u" x="{{.X}}" y="{{.YU}}" width="{{$.BarW}}" height="{{.HU}}"/>{{end -}}
{{- if .HI}}<rect class="i" x="{{.X}}" y="{{.YI}}" width="{{$.BarW}}" height="{{.HI}}"/>{{end -}}
</g>
{{- end}}
</svg>
<p class="legend">Peak {{.Max}} per minute.<span style="background:#2e7d32"></span>verified<span style="background:#bdbdbd"></span>not-present<span style="background:#f9a825"></span>unverified<span style="background:#c62828"></span>invalid</p>

<h2>Top agents</h2>
<table id="agents">
<thead><tr><th>Agent</th><th>Requests</th><th>Verified</th><th>Invalid</th><th>± (sketch)</th></tr></thead>
<tbody>
{{- range .Agents}}
<tr class="agent" data-id="{{.ID}}" data-requests="{{.Requests}}" data-verified="{{.Verified}}" data-invalid="{{.Invalid}}"{{if .UID}} data-uid="{{.UID}}"{{end}}{{if .Name}} data-name="{{.Name}}"{{end}}><td>{{if .UID}}<b class="uid">{{.UID}}</b>{{if .Name}} {{end}}{{end}}{{if .Name}}<b class="name">{{.Name}}</b>{{if .Purpose}} <span class="purpose">({{.Purpose}})</span>{{end}}{{end}}{{if or .UID .Name}}<br>{{end}}{{.ID}}</td><td class="n">{{.Requests}}</td><td class="n">{{.Verified}}</td><td class="n">{{.Invalid}}</td><td class="n">{{.Error}}</td></tr>
{{- else}}
<tr><td colspan="5">No agent yet.</td></tr>
{{- end}}
</tbody>
</table>

<h2>Refusals</h2>
<table id="refusals">
<thead><tr><th>Outcome</th><th>Reason</th><th>Refused</th></tr></thead>
<tbody>
{{- range .Refusals}}
<tr class="refusal" data-outcome="{{.Outcome}}" data-reason="{{.Reason}}" data-count="{{.Count}}"><td>{{.Outcome}}</td><td>{{.Reason}}</td><td class="n">{{.Count}}</td></tr>
{{- else}}
<tr><td colspan="3">No refusal.</td></tr>
{{- end}}
</tbody>
</table>

<h2>Requests not verified</h2>
<table id="reasons">
<thead><tr><th>Outcome</th><th>Reason</th><th>Requests</th></tr></thead>
<tbody>
{{- range .Reasons}}
<tr class="reason" data-outcome="{{.Outcome}}" data-reason="{{.Reason}}" data-count="{{.Count}}"><td>{{.Outcome}}</td><td>{{.Reason}}</td><td class="n">{{.Count}}</td></tr>
{{- else}}
<tr><td colspan="3">Every request was verified.</td></tr>
{{- end}}
</tbody>
</table>

<h2>Key fetches</h2>
<p id="fetch" data-ok="{{.Fetch.OK}}" data-failed="{{.Fetch.Failed}}" data-failed-hour="{{.Fetch.FailedHour}}">
{{- if .Fetch.FailedHour}}<span class="bad">{{.Fetch.FailedHour}} failed in the last hour</span>{{else}}<span class="ok">No failure in the last hour</span>{{end}};
{{.Fetch.OK}} verified requests found their key, {{.Fetch.Failed}} fetches failed since start; last failure: {{ts .Fetch.LastFailure}}.</p>
</body>
</html>
`))

// render writes the page for s.
func render(w io.Writer, s Snapshot) error {
	var buf bytes.Buffer
	if err := page.Execute(&buf, s.view()); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}
