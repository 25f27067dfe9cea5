package report

import "html/template"

// pageTemplate is the HTML report. It must stay self-contained: no link,
// no script, no font or image from anywhere (the report is read offline and
// attached to issues).
var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
:root { --ink:#1f2933; --muted:#616e7c; --line:#e4e7eb; --bad:#c62828; --good:#2e7d32; --bg:#f5f7fa; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink); font:14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width:1180px; margin:0 auto; padding:24px 28px 48px; }
header h1 { margin:0; font-size:26px; letter-spacing:-0.01em; }
header .meta, .setting { color:var(--muted); margin:2px 0 0; }
header code { background:#e4e7eb; padding:1px 6px; border-radius:4px; font-size:12.5px; }
h2 { font-size:20px; margin:0 0 4px; }
h3 { font-size:15px; margin:18px 0 6px; }
section { background:white; border:1px solid var(--line); border-radius:10px; padding:18px 22px; margin:18px 0; box-shadow:0 1px 2px rgba(0,0,0,.04); }
#verdict { border-left:6px solid var(--ink); }
.cards { display:grid; grid-template-columns:repeat(auto-fit, minmax(340px, 1fr)); gap:12px; margin-top:10px; }
.card { border:1px solid var(--line); border-radius:8px; padding:12px 14px; border-left:5px solid var(--good); }
.card.lost { border-left-color:var(--bad); }
.card h3 { margin:0 0 4px; font-size:16px; }
.card h3 a { color:inherit; text-decoration:none; }
.card h3 small { color:var(--muted); font-weight:normal; }
.card p { margin:6px 0 0; }
.card .injected, .verdict-lines .injected { color:var(--muted); font-size:13px; }
.chips { display:flex; flex-wrap:wrap; gap:6px; margin-top:6px; }
.chip { display:inline-flex; align-items:center; gap:6px; border-radius:999px; padding:1px 10px 1px 8px; font-size:12.5px; border:1px solid var(--line); background:#fff; }
.chip i { width:10px; height:10px; border-radius:50%; display:inline-block; }
.chip.bad { background:#ffebee; border-color:#ef9a9a; color:#b71c1c; font-weight:600; }
.chip.good { background:#e8f5e9; border-color:#a5d6a7; color:#1b5e20; }
.chip.skip { background:#f5f5f5; color:#616161; }
.closing { margin:14px 0 0; max-width:900px; }
.table-wrap { overflow-x:auto; }
table.results { border-collapse:collapse; width:100%; margin:10px 0 6px; font-variant-numeric:tabular-nums; font-size:13px; }
table.results th, table.results td { padding:5px 8px; border-bottom:1px solid var(--line); text-align:right; white-space:nowrap; }
table.results th { color:var(--muted); font-weight:600; font-size:12px; cursor:help; }
table.results th:first-child, table.results td:first-child { text-align:left; }
table.results tr.bad td { background:#fff5f5; }
table.results tr.bad td.violations { color:var(--bad); font-weight:700; }
td.approach i { display:inline-block; width:10px; height:10px; border-radius:2px; margin-right:6px; }
td.unchecked { color:#9e9e9e; }
ul.labels { margin:6px 0; padding-left:18px; color:var(--muted); font-size:12.5px; }
ul.labels b { color:var(--ink); font-weight:600; }
.charts { display:flex; flex-wrap:wrap; gap:16px; margin-top:10px; }
.charts svg { max-width:100%; height:auto; background:#fff; }
.timeline { margin:14px 0 0; border-top:1px solid var(--line); padding-top:10px; }
.timeline figcaption { font-weight:600; }
.timeline figcaption small { font-weight:normal; color:var(--muted); }
.timeline svg { display:block; margin-top:6px; }
.how-to-read { margin:4px 0 8px; max-width:980px; }
.zoom-caption { margin:8px 0 0; font-size:12px; color:var(--muted); text-transform:uppercase; letter-spacing:.04em; }
.closeup { border:1px solid #cfd8dc; border-radius:6px; background:#fcfcfd; }
.legend { display:flex; flex-wrap:wrap; gap:14px; color:var(--muted); font-size:12.5px; margin:6px 0 0; }
.legend svg { vertical-align:middle; margin-right:4px; }
.note { color:var(--muted); font-size:12.5px; }
details > summary { cursor:pointer; color:var(--muted); }
footer { color:var(--muted); font-size:12.5px; text-align:center; margin-top:24px; }
</style>
</head>
<body>
<main>
<header>
<h1>{{.Title}}</h1>
<p class="meta">{{if .Generated}}{{.Generated}} · {{end}}{{len .Scenarios}} run{{if ne (len .Scenarios) 1}}s{{end}}{{if .Command}} · <code>{{.Command}}</code>{{end}}</p>
</header>

<section id="verdict">
<h2>Verdict</h2>
<div class="cards">
{{- range .Cards}}
<div class="card{{if .Lost}} lost{{end}}">
<h3><a href="#{{.ID}}">{{.Name}}</a>{{if .Point}} <small>{{.Point}}</small>{{end}}</h3>
<div class="chips">{{range .Chips}}<span class="chip {{.Class}}"><i style="background:{{.Color}}"></i>{{.Approach}}: {{.Text}}</span>{{end}}</div>
{{range .Lines}}{{if .}}<p>{{.}}</p>{{end}}{{end}}
{{if .Injected}}<p class="injected">{{.Injected}}</p>{{end}}
</div>
{{- end}}
</div>
<p class="closing">{{.Closing}}</p>
</section>

{{range .Sweeps}}
<section class="sweep" id="{{.ID}}">
<h2>{{.Scenario}}: sweep</h2>
<p class="setting">{{.Axes}} — a dashed line is an approach whose check found violations at some point of the sweep, an × a point where it failed; each point's table is further down.</p>
<p>{{.Verdict}}</p>
<div class="charts">{{range .Charts}}{{.}}{{end}}</div>
</section>
{{end}}

{{range .Scenarios}}
<section class="scenario" id="{{.ID}}">
{{if .InSweep}}<details><summary><b>{{.Name}}</b> at {{.Point}}: {{.Safety}}</summary>{{end}}
<h2>{{.Name}}{{if .Point}} <small class="setting">{{.Point}}</small>{{end}}</h2>
<p class="setting">{{.Setting}}</p>
<div class="verdict-lines"><p>{{.Safety}} {{.Speed}}</p><p class="injected">{{.Injected}}</p></div>
<div class="table-wrap"><table class="results">
<thead><tr><th>approach</th>{{range .Heads}}<th title="{{.Title}}">{{.Head}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Rows}}
<tr class="{{if .Bad}}bad{{end}}"><td class="approach"><i style="background:{{.Color}}"></i>{{.Approach}}</td>
{{- if .Missing}}<td colspan="{{len .Cells}}" class="unchecked">{{.Missing}}</td>
{{- else}}{{range $i, $c := .Cells}}<td{{if eq $c "—"}} class="unchecked"{{end}}>{{$c}}</td>{{end}}{{end}}</tr>
{{- end}}
</tbody>
</table></div>
{{range .Ratios}}<p class="note">{{.}}</p>{{end}}
<ul class="labels">{{range .Rows}}<li><b>{{.Approach}}</b>: {{.Label}}</li>{{end}}{{range .Notes}}<li>note: {{.}}</li>{{end}}</ul>
<div class="charts">{{range .Charts}}{{.}}{{end}}</div>
{{if .Schedules}}
<h3>Random schedules</h3>
<p class="how-to-read">The faults each approach's run drew from seed {{.Seed}}: due time into the measured part, fault, worker, length; ✓ took effect, ✗ did not; the worker hit and start time when they differ. The same seed and options replay them.</p>
<ul class="labels">{{range .Schedules}}<li><b>{{.Approach}}</b>: {{.Text}}{{if .Replay}}<br>replay: <code>{{.Replay}}</code>{{end}}{{if .Shrunk}}<br>{{.Shrunk}}{{end}}</li>{{end}}</ul>
{{end}}
{{if .Metrics}}
<h3>Metrics</h3>
<p class="how-to-read">What each approach's lockfree components recorded through their MeterProvider (<code>--metrics</code>), summed over its workers, warm-up included: what an operator would see in production.</p>
<div class="table-wrap"><table class="results metrics">
<thead><tr><th>approach</th><th>metric</th><th>attributes</th><th>value</th></tr></thead>
<tbody>
{{- range .Metrics}}
<tr><td class="approach"><i style="background:{{.Color}}"></i>{{.Approach}}</td><td>{{.Name}}</td><td>{{.Attrs}}</td><td>{{.Value}}</td></tr>
{{- end}}
</tbody>
</table></div>
{{end}}
{{if .Timelines}}
<h3>Timeline</h3>
<p class="how-to-read">Read a close-up left to right: a worker takes the lease (a bar with its token) and pauses past it (hatched);
another worker takes over with a newer token and writes. When the paused worker wakes up, a fenced lock rejects its write (×),
while a naive lock accepts it (!) and overwrites the newer write (dashed arrow). One lane per worker; hover anything for details.</p>
<div class="legend">
<span><svg width="26" height="12"><rect x="1" y="1" width="24" height="10" rx="3" fill="#1565c0" fill-opacity=".22" stroke="#1565c0"/></svg>lease held (token)</span>
<span><svg width="26" height="12"><defs><pattern id="lg-{{.ID}}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#eceff1"/><line x1="0" y1="0" x2="0" y2="6" stroke="#90a4ae" stroke-width="2.5"/></pattern></defs><rect x="1" y="1" width="24" height="10" fill="url(#lg-{{.ID}})" stroke="#78909c"/></svg>paused (SIGSTOP)</span>
<span><svg width="26" height="12"><rect x="1" y="1" width="24" height="10" fill="#ffe0b2" stroke="#78909c"/></svg>isolated</span>
<span><svg width="12" height="16"><line x1="6" x2="6" y1="0" y2="16" stroke="#263238" stroke-width="1.4"/></svg>write accepted</span>
<span><svg width="12" height="12"><path d="M2,2l8,8m0,-8l-8,8" stroke="#ef6c00" stroke-width="2.2"/></svg>write rejected by the fence</span>
<span><svg width="12" height="12"><circle cx="6" cy="6" r="4" fill="white" stroke="#607d8b" stroke-width="1.5"/></svg>fate unknown</span>
<span><svg width="16" height="16"><circle cx="8" cy="8" r="7" fill="#c62828"/><text x="8" y="12" text-anchor="middle" fill="white" font-size="11" font-weight="bold" font-family="sans-serif">!</text></svg>stale write that broke the data</span>
<span><svg width="30" height="14"><path d="M2,10 Q15,0 26,10" fill="none" stroke="#b71c1c" stroke-width="1.8" stroke-dasharray="4 2"/><circle cx="26" cy="10" r="3.5" fill="none" stroke="#b71c1c" stroke-width="1.5"/></svg>→ the newer write it overwrote</span>
</div>
{{range .Timelines}}
<figure class="timeline" data-approach="{{.Approach}}">
<figcaption><span style="color:{{.Color}}">■</span> {{.Approach}} <small>— {{.Label}} · {{.Summary}}</small></figcaption>
{{if .CloseUp}}<p class="zoom-caption">{{.CloseUpCaption}}</p>
<div class="closeup">{{.CloseUp}}</div>
<p class="zoom-caption">whole run</p>{{end}}
{{.SVG}}
{{if .Note}}<p class="note">Drawn in part: {{.Note}}.</p>{{end}}
</figure>
{{end}}
{{else}}<p class="note">No timeline: this run recorded none.</p>{{end}}
{{if .InSweep}}</details>{{end}}
</section>
{{end}}

<footer>Made by <code>lockfree compare --html</code>. Self-contained: this page loads nothing from anywhere. Hover a mark or a bar for its details.</footer>
</main>
</body>
</html>
`))
