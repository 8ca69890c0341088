// Package docs holds no code: its test checks that the documentation's
// links resolve, so that moving a section or renaming a heading is caught
// where the link to it is.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, seen from this directory.
const root = ".."

// markdownFiles returns README.md and every Markdown file under docs/, as
// slash paths from the root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	inlineLink = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	emphasis   = regexp.MustCompile(`\*+`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose returns the lines of a Markdown file outside fenced code blocks,
// with their line numbers (from 1).
func prose(text string) (lines []string, numbers []int) {
	in := false
	for i, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			lines = append(lines, l)
			numbers = append(numbers, i+1)
		}
	}
	return lines, numbers
}

// slug is GitHub's anchor for a heading's text: the text as rendered
// (code spans keep their content, links their text, emphasis goes),
// lower-cased, with every character that is not a letter, a mark, a
// digit, a connector, a space or a hyphen removed, and each space made a
// hyphen.
func slug(text string) string {
	text = strings.ReplaceAll(text, "`", "")
	text = inlineLink.ReplaceAllString(text, "$1")
	text = emphasis.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file: one per heading, a
// repeated slug numbered -1, -2, … as GitHub numbers it, and explicit
// <a name> or <a id> anchors.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines, _ := prose(text)
	for _, l := range lines {
		if m := heading.FindStringSubmatch(l); m != nil {
			s := slug(m[2])
			if n := seen[s]; n > 0 {
				out[s+"-"+strconv.Itoa(n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// TestSlug pins the anchor rule on headings of this repository's kind.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Several instances":                                                                               "several-instances",
		"A hosted instance: registration and operators":                                                   "a-hosted-instance-registration-and-operators",
		"`PUT /agents/{uid}/directory-signatures` — sign the key directory":                               "put-agentsuiddirectory-signatures--sign-the-key-directory",
		"The credentials file: directory refresh, locking, backoff":                                       "the-credentials-file-directory-refresh-locking-backoff",
		"Keys outside `.env`":                                                                             "keys-outside-env",
		"What the module saves over [`forward_auth`](proxy.md#caddy)":                                     "what-the-module-saves-over-forward_auth",
		"Policy identity: what an agent can vary at will":                                                 "policy-identity-what-an-agent-can-vary-at-will",
		"**Bold** and *emphasis*":                                                                         "bold-and-emphasis",
		"Quiet-machine figures, end of the many-agents round":                                             "quiet-machine-figures-end-of-the-many-agents-round",
		"`GET`, `HEAD`, `OPTIONS /.well-known/http-message-signatures-directory` and `/` — key directory": "get-head-options-well-knownhttp-message-signatures-directory-and---key-directory",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
	a := anchors("# A\n\n## Setup\n\n```sh\n# Setup\n```\n\n### Setup\n\n## Setup\n")
	for _, want := range []string{"a", "setup", "setup-1", "setup-2"} {
		if !a[want] {
			t.Errorf("anchors: %q missing from %v", want, a)
		}
	}
	if a["setup-3"] {
		t.Errorf("anchors: a heading inside a code block counted: %v", a)
	}
}

// TestLinks checks every relative link and #anchor of README.md and of
// the Markdown files under docs/: the file (or directory) it names
// exists, and is one the release archive holds (README.md, LICENSE or
// under docs/), so the links work from the archive too; an anchor into a
// Markdown file is one of its headings. Links with a scheme (https:,
// mailto:) are not followed.
func TestLinks(t *testing.T) {
	files := markdownFiles(t)
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files (%v); is the root %s?", len(files), files, root)
	}
	texts := map[string]string{}
	read := func(name string) (string, bool) {
		if s, ok := texts[name]; ok {
			return s, true
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return "", false
		}
		texts[name] = string(b)
		return string(b), true
	}
	checked := 0
	for _, file := range files {
		text, ok := read(file)
		if !ok {
			t.Fatalf("cannot read %s", file)
		}
		lines, numbers := prose(text)
		for i, l := range lines {
			l = codeSpan.ReplaceAllString(l, "")
			for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
				target := m[2]
				if target == "" || scheme.MatchString(target) {
					continue
				}
				checked++
				where := file + ":" + strconv.Itoa(numbers[i])
				path, anchor, _ := strings.Cut(target, "#")
				name := file
				if path != "" {
					name = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
					if name != "README.md" && name != "LICENSE" && !strings.HasPrefix(name, "docs/") {
						t.Errorf("%s: %s: %s is not in the release archive (README.md, LICENSE, docs/)", where, target, name)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(name))); err != nil {
						t.Errorf("%s: %s: no file %s", where, target, name)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(name, ".md") {
					continue
				}
				targetText, ok := read(name)
				if !ok {
					t.Errorf("%s: %s: cannot read %s", where, target, name)
					continue
				}
				if !anchors(targetText)[anchor] {
					t.Errorf("%s: %s: %s has no heading with anchor #%s", where, target, name, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d links; is the link pattern still right?", checked)
	}
}

// docMention is a path under docs/ named in a Go comment or string, with
// an optional #anchor.
var docMention = regexp.MustCompile(`docs/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.(?:md|yaml|json|png)(?:#[a-z0-9_-]+)?`)

// TestGoMentions checks the documents that Go files of the repository
// name (docs/security.md, docs/proxy.md#reload): each exists, and an
// anchor is one of its headings.
func TestGoMentions(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range docMention.FindAllString(string(b), -1) {
			checked++
			name, anchor, _ := strings.Cut(m, "#")
			text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
			if err != nil {
				t.Errorf("%s names %s, which does not exist", path, m)
				continue
			}
			if anchor != "" && strings.HasSuffix(name, ".md") && !anchors(string(text))[anchor] {
				t.Errorf("%s names %s: %s has no heading with anchor #%s", path, m, name, anchor)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("found %d mentions of docs/ in Go files; is the root %s?", checked, root)
	}
}
