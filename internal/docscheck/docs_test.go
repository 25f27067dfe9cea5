// Package docscheck holds the repository's checks of its hand-written
// pages: README.md, ARCHITECTURE.md, CONTRIBUTING.md, CHANGELOG.md, docs/
// (but the generated results.md) and the examples. It has no code of its
// own; `make docs-check` and `make test` run its tests.
//
// The measure: prose is what is not a fenced code block, a table, a
// heading, an HTML comment or an image. A paragraph is a run of prose
// lines; a list item is a paragraph of its own. A sentence ends at . ! ? :
// or ; before a space or the line's end; words after the last stop of a
// paragraph are one more sentence. Inline code counts as one word and a
// link as its text.
package docscheck

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The budgets every page keeps.
const (
	maxReadmeLines     = 120
	maxMeanSentence    = 18.0 // words
	maxParagraphWords  = 120
	maxUnreleasedLines = 250
	maxExampleLines    = 250

	// maxWords caps the prose words of the counted pages (the pages and
	// CHANGELOG.md) together: at most half of the 47,470 they had before
	// the diet (commit 22b7c6c; count them with -words-at 22b7c6c). They
	// reached 22,469; a new page fits in what is left, or another page
	// shortens.
	maxWords = 23700
)

// wordsAt, when set, counts the pages at that git revision instead of the
// tree, and enforces no cap: `go test ./internal/docscheck/ -run
// TestWordCount -v -args -words-at 22b7c6c`.
var wordsAt = flag.String("words-at", "", "count the pages' words at this git revision")

// overBudget lists the pages not yet within a budget, with the figure each
// had when it was listed: a listed page may shrink, never grow. A page that
// comes within its budget must leave the list (the test says so), so the
// list only gets shorter.
var overBudget = map[string]float64{}

// root is the repository's root.
func root(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// pageGlobs match the hand-written Markdown pages, relative to the root;
// docs/results.md, which scripts write, is not one of them.
var pageGlobs = []string{"README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "docs/*.md", "examples/*.md", "examples/*/README.md"}

// isPage says whether rel, a slash-separated path relative to the root, is
// a hand-written page.
func isPage(rel string) bool {
	for _, g := range pageGlobs {
		if ok, _ := filepath.Match(g, rel); ok && rel != "docs/results.md" {
			return true
		}
	}
	return false
}

// pages are the hand-written Markdown pages, relative to the root.
func pages(t *testing.T) []string {
	t.Helper()
	r := root(t)
	var ps []string
	for _, glob := range pageGlobs {
		m, err := filepath.Glob(filepath.Join(r, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(r, p)
			if isPage(filepath.ToSlash(rel)) {
				ps = append(ps, filepath.ToSlash(rel))
			}
		}
	}
	return ps
}

// budgets collects every page's figure for every budget it is over, and
// tells the test which listed figures grew.
type budgets struct {
	t    *testing.T
	seen map[string]bool
}

func (b *budgets) check(name string, got, limit float64) {
	b.t.Helper()
	listed, ok := overBudget[name]
	switch {
	case got <= limit && ok:
		b.t.Errorf("%s is %.1f, within its budget of %.0f: remove it from overBudget", name, got, limit)
	case got <= limit:
	case !ok:
		b.t.Errorf("%s is %.1f, over its budget of %.0f", name, got, limit)
	case got > listed+0.05:
		b.t.Errorf("%s grew to %.1f (listed at %.1f, budget %.0f): shorten it", name, got, listed, limit)
	}
	b.seen[name] = true
}

func TestPagesKeepTheirBudgets(t *testing.T) {
	r := root(t)
	b := &budgets{t: t, seen: map[string]bool{}}
	for _, p := range pages(t) {
		text := read(t, filepath.Join(r, p))
		if p == "README.md" {
			b.check(p+" lines", float64(strings.Count(text, "\n")), maxReadmeLines)
		}
		st := measure(text)
		t.Logf("%s: %d words, %d sentences, longest paragraph %d words", p, st.words, st.sentences, st.longest)
		if st.sentences > 0 {
			b.check(p+" mean sentence", round1(float64(st.words)/float64(st.sentences)), maxMeanSentence)
		}
		b.check(p+" paragraph", float64(st.longest), maxParagraphWords)
	}
	mains, err := filepath.Glob(filepath.Join(r, "examples", "*", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mains {
		rel, _ := filepath.Rel(r, m)
		b.check(filepath.ToSlash(rel)+" lines", float64(strings.Count(read(t, m), "\n")), maxExampleLines)
	}
	b.check("CHANGELOG.md unreleased lines", float64(unreleasedLines(read(t, filepath.Join(r, "CHANGELOG.md")))), maxUnreleasedLines)
	for name := range overBudget {
		if !b.seen[name] {
			t.Errorf("overBudget lists %s, which names no page: remove it", name)
		}
	}
}

// The counted pages (every page and CHANGELOG.md) keep under maxWords
// words of prose together, counted as measure counts them.
func TestWordCount(t *testing.T) {
	r := root(t)
	names := append(pages(t), "CHANGELOG.md")
	text := func(p string) string { return read(t, filepath.Join(r, p)) }
	if *wordsAt != "" {
		names, text = pagesAt(t, r, *wordsAt)
	}
	total := 0
	for _, p := range names {
		w := measure(text(p)).words
		total += w
		t.Logf("%6d %s", w, p)
	}
	t.Logf("%6d words in %d pages", total, len(names))
	if *wordsAt == "" && total > maxWords {
		t.Errorf("the pages have %d words, over the cap of %d: shorten them", total, maxWords)
	}
}

// pagesAt lists the counted pages of git revision rev and reads them there.
func pagesAt(t *testing.T, root, rev string) ([]string, func(string) string) {
	t.Helper()
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	var names []string
	for _, p := range strings.Fields(git("ls-tree", "-r", "--name-only", rev)) {
		if isPage(p) || p == "CHANGELOG.md" {
			names = append(names, p)
		}
	}
	return names, func(p string) string { return git("show", rev+":"+p) }
}

func round1(x float64) float64 { return float64(int(x*10+0.5)) / 10 }

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// unreleasedLines counts the lines of CHANGELOG's first "## " section.
func unreleasedLines(text string) int {
	n, in := 0, false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "## ") {
			if in {
				break
			}
			in = true
		}
		if in {
			n++
		}
	}
	return n
}

// stats are a page's prose figures: code blocks, tables, headings, HTML
// comments and link-only lines are not prose.
type stats struct {
	words, sentences int
	longest          int // words of the longest paragraph (a list item is one)
}

var (
	sentenceEnd = regexp.MustCompile(`[.!?:;](\s|$)`)
	inlineCode  = regexp.MustCompile("`[^`]*`")
	linkTarget  = regexp.MustCompile(`\]\([^)]*\)`)
	listItem    = regexp.MustCompile(`^\s*([-*+]|\d+\.)\s+`)
)

// measure splits text's prose into paragraphs and sentences: sentences
// end at . ! ? : or ; followed by a space or the end of the line.
func measure(text string) stats {
	var st stats
	var para []string
	flush := func() {
		if len(para) == 0 {
			return
		}
		p := strings.Join(para, " ")
		para = nil
		p = linkTarget.ReplaceAllString(p, "]")
		p = inlineCode.ReplaceAllString(p, "code")
		w := len(strings.Fields(p))
		if w == 0 {
			return
		}
		st.words += w
		st.longest = max(st.longest, w)
		p = strings.TrimSpace(p)
		ends := sentenceEnd.FindAllStringIndex(p, -1)
		st.sentences += len(ends)
		if len(ends) == 0 || len(strings.Fields(p[ends[len(ends)-1][1]:])) > 0 {
			st.sentences++ // words after the last end: a sentence without its stop
		}
	}
	fence, comment := false, false
	for _, l := range strings.Split(text, "\n") {
		trim := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trim, "```"):
			flush()
			fence = !fence
			continue
		case fence:
			continue
		case strings.HasPrefix(trim, "<!--"):
			flush()
			comment = !strings.Contains(trim, "-->")
			continue
		case comment:
			comment = !strings.Contains(trim, "-->")
			continue
		case trim == "", strings.HasPrefix(trim, "#"), strings.HasPrefix(trim, "|"), strings.HasPrefix(trim, "!["):
			flush()
			continue
		case listItem.MatchString(l):
			flush()
			l = listItem.ReplaceAllString(l, "")
		}
		para = append(para, strings.TrimSpace(l))
	}
	flush()
	return st
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of every page, CHANGELOG's too, names a file or
// folder that exists (anchors are not checked).
func TestRelativeLinksResolve(t *testing.T) {
	r := root(t)
	for _, p := range append(pages(t), "CHANGELOG.md", "docs/results.md") {
		text := read(t, filepath.Join(r, p))
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			path := filepath.Join(r, filepath.Dir(p), filepath.FromSlash(target))
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", p, m[1])
			}
		}
	}
}

// stripCode drops fenced code blocks and inline code.
func stripCode(text string) string {
	var out []string
	fence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if !fence {
			out = append(out, inlineCode.ReplaceAllString(l, ""))
		}
	}
	return strings.Join(out, "\n")
}

// The measure behaves as its comment says.
func TestMeasure(t *testing.T) {
	text := "# Title\n\nOne two three. Four five: six\nseven.\n\n| a | b |\n|---|---|\n\n```go\nx := 1. 2. 3.\n```\n\n- an item of five words\n- another; two\n"
	st := measure(text)
	want := stats{words: 7 + 5 + 2, sentences: 3 + 1 + 2, longest: 7}
	if st != want {
		t.Fatalf("measure = %+v, want %+v", st, want)
	}
	if got := unreleasedLines("# C\n\n## Unreleased\n\n- a\n\n## 0.1\n- b\n"); got != 4 {
		t.Fatalf("unreleasedLines = %d, want 4", got)
	}
}
