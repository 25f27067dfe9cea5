// Package docsync keeps the figures that the package pages in docs/ quote
// from docs/results.md identical to it, so that no hand-typed figure can
// disagree with a generated one.
//
// A quote is a block of a page between two markers:
//
//	<!-- copy of results.md: SECTION > SUBSECTION | COLUMN, COLUMN, … | where COLUMN=VALUE -->
//	<!-- end of copy -->
//
// Sync writes its body from the section the path names (headings matched
// by their text, each within the one before it): a link to the section and
// the command that produced it, the section's first table cut to the
// columns named ("*": all of them) and to the rows the optional where
// clauses keep, and the section's verdict when it has one. TestPagesQuoteResults
// fails when a page's copy is stale; `go test ./cmd/lockfree/internal/docsync
// -args -update` (which scripts/results.sh runs after regenerating) rewrites
// them.
//
// Why copies rather than links alone: five pages (atomic, occ, idempotency,
// singlewriter, compare) show their own scenario's figures beside the prose
// that explains them, and a reader in a hurry reads the page, not
// results.md. The copies are generated, so the rule that figures live in
// results.md holds: no page types a figure by hand.
package docsync

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Results is the page every copy is taken from, relative to docs/.
const Results = "results.md"

const endMarker = "<!-- end of copy -->"

var beginMarker = regexp.MustCompile(`^<!-- copy of results\.md: (.*) -->$`)

// ErrCopy is what a malformed marker, or a section or column that
// results.md does not have, wraps.
var ErrCopy = errors.New("docsync: bad copy")

// Sync returns page with every copy block's body rewritten from results.
func Sync(page, results []byte) ([]byte, error) {
	doc := parse(results)
	lines := strings.Split(string(page), "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		out = append(out, lines[i])
		m := beginMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		end := slices.Index(lines[i+1:], endMarker)
		if end < 0 {
			return nil, fmt.Errorf("%w: line %d: no %q after its marker", ErrCopy, i+1, endMarker)
		}
		body, err := doc.render(m[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, body...)
		i += end // the loop's i++ lands on the end marker, kept
	}
	return []byte(strings.Join(out, "\n")), nil
}

// heading is one heading of results.md: its level (number of #), text,
// GitHub anchor and line.
type heading struct {
	level  int
	text   string
	anchor string
	line   int
}

type document struct {
	lines    []string
	headings []heading
}

func parse(results []byte) document {
	d := document{lines: strings.Split(string(results), "\n")}
	seen := map[string]int{}
	for i, l := range d.lines {
		level := len(l) - len(strings.TrimLeft(l, "#"))
		if level == 0 || level > 6 || !strings.HasPrefix(l[level:], " ") {
			continue
		}
		text := strings.TrimSpace(l[level:])
		a := slug(text)
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		d.headings = append(d.headings, heading{level: level, text: text, anchor: a, line: i})
	}
	return d
}

// slug is GitHub's anchor for a heading's text: lower case, letters,
// digits, '-' and '_' kept, spaces made '-', the rest dropped.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// section finds the heading path names, each part within the one before,
// and returns it with the index of the line after its section.
func (d document) section(path []string) (heading, int, error) {
	from, to, level := 0, len(d.lines), 0
	var found heading
	for _, part := range path {
		var hits []heading
		for _, h := range d.headings {
			if h.line > from && h.line < to && h.level > level && h.text == part {
				hits = append(hits, h)
			}
		}
		if len(hits) != 1 {
			return heading{}, 0, fmt.Errorf("%w: %d sections named %q in %s", ErrCopy, len(hits), part, Results)
		}
		found = hits[0]
		from, level = found.line, found.level
		to = len(d.lines)
		for _, h := range d.headings {
			if h.line > from && h.level <= level {
				to = h.line
				break
			}
		}
	}
	return found, to, nil
}

// render is the body of the copy spec asks for.
func (d document) render(spec string) ([]string, error) {
	parts := strings.Split(spec, " | ")
	if len(parts) < 2 {
		return nil, fmt.Errorf("%w: %q: want SECTION | COLUMNS [| where COLUMN=VALUE …]", ErrCopy, spec)
	}
	path := strings.Split(parts[0], " > ")
	for i := range path {
		path[i] = strings.TrimSpace(path[i])
	}
	h, end, err := d.section(path)
	if err != nil {
		return nil, err
	}
	body := d.lines[h.line+1 : end]
	var command, verdict string
	var table []string
	for i, l := range body {
		switch {
		case command == "" && strings.HasPrefix(l, "`"):
			if j := strings.Index(l[1:], "`"); j >= 0 {
				command = l[:j+2]
			}
		case table == nil && strings.HasPrefix(l, "|"):
			for _, t := range body[i:] {
				if !strings.HasPrefix(t, "|") {
					break
				}
				table = append(table, t)
			}
		case verdict == "" && strings.HasPrefix(l, "**Verdict.**"):
			verdict = l
		}
	}
	if len(table) < 2 {
		return nil, fmt.Errorf("%w: section %q has no table", ErrCopy, h.text)
	}
	table, err = cut(table, parts[1], parts[2:])
	if err != nil {
		return nil, fmt.Errorf("section %q: %w", h.text, err)
	}
	intro := fmt.Sprintf("From [%s § %s](%s#%s), generated by `scripts/results.sh`", Results, strings.Join(path, " › "), Results, h.anchor)
	if command != "" {
		intro += ": " + command
	}
	out := append([]string{intro + ":", ""}, table...)
	if verdict != "" {
		out = append(out, "", verdict)
	}
	return out, nil
}

// cut keeps the columns named in columns ("*": all) of a Markdown table, in
// that order, and the rows every where clause ("where COLUMN=VALUE") keeps.
func cut(table []string, columns string, where []string) ([]string, error) {
	rows := make([][]string, len(table))
	for i, l := range table {
		rows[i] = cells(l)
	}
	header := rows[0]
	index := func(name string) (int, error) {
		if i := slices.Index(header, name); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("%w: no column %q (the table has %s)", ErrCopy, name, strings.Join(header, ", "))
	}
	var keep []int
	if strings.TrimSpace(columns) == "*" {
		for i := range header {
			keep = append(keep, i)
		}
	} else {
		for _, c := range strings.Split(columns, ",") {
			i, err := index(strings.TrimSpace(c))
			if err != nil {
				return nil, err
			}
			keep = append(keep, i)
		}
	}
	type filter struct {
		col   int
		value string
	}
	var filters []filter
	for _, w := range where {
		col, value, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(w), "where "), "=")
		if !ok || !strings.HasPrefix(strings.TrimSpace(w), "where ") {
			return nil, fmt.Errorf("%w: %q: want where COLUMN=VALUE", ErrCopy, w)
		}
		i, err := index(strings.TrimSpace(col))
		if err != nil {
			return nil, err
		}
		filters = append(filters, filter{i, strings.TrimSpace(value)})
	}
	var out []string
	for r, row := range rows {
		if r > 1 && slices.ContainsFunc(filters, func(f filter) bool { return f.col >= len(row) || row[f.col] != f.value }) {
			continue
		}
		var b bytes.Buffer
		b.WriteString("|")
		for _, i := range keep {
			c := ""
			if i < len(row) {
				c = row[i]
			}
			b.WriteString(" " + c + " |")
		}
		out = append(out, b.String())
	}
	if len(out) < 3 {
		return nil, fmt.Errorf("%w: no row is left by %s", ErrCopy, strings.Join(where, ", "))
	}
	return out, nil
}

// cells splits a Markdown table row into its trimmed cells.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(strings.TrimSuffix(row, "|"), "|")
	cs := strings.Split(row, "|")
	for i := range cs {
		cs[i] = strings.TrimSpace(cs[i])
	}
	return cs
}
