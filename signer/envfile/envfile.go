// Package envfile reads and edits dotenv files (".env"), shared by the
// agent (signer/agent, its credentials file) and idcli (the reference
// server's settings file).
// Lines an edit does not touch are written back byte for byte, so a file
// shared with other tools (vestauth writes one) keeps its form.
//
//	f, err := envfile.Read(".env") // a missing file reads as empty
//	v, ok := f.Get("HOSTNAME")
//	f.Set("PORT", "3000")
//	err = f.Write() // atomic, mode 0600
//	err = envfile.Update(ctx, ".env", func(f *envfile.File) (bool, error) { … }) // under the file's lock
package envfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// File is a dotenv file (".env") read into memory, edited with Set and
// written back with Write. Lines that Set does not touch — comments, blank
// lines, other variables, even lines it cannot parse — are written back
// byte for byte.
//
// Reading accepts bare values (KEY=value, an unquoted " #" starts a comment),
// single-quoted values (taken verbatim), double-quoted values with backslash
// escapes (\" \\ \n \r \t), an optional "export " prefix, and the form
// vestauth writes: JSON inside double quotes whose inner quotes are not
// escaped (KEY="{"kty":"OKP",…}"). The rule for that last form: when the text
// between the first double quote and the last double quote on the line is
// valid JSON, it is the value, verbatim.
//
// A File is not safe for concurrent use.
type File struct {
	path  string
	lines []envLine
}

type envLine struct {
	raw   string // the line as read or written, without the newline
	key   string // "" for comments, blank lines and unparsable lines
	value string
}

// Read reads the dotenv file at path. A missing file gives an empty
// File and no error, so that Set and Write create it.
func Read(path string) (*File, error) {
	f := &File{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("envfile: %w", err)
	}
	text := strings.ReplaceAll(string(b), "\r\n", "\n")
	text = strings.TrimSuffix(text, "\n")
	if text == "" {
		return f, nil
	}
	for _, raw := range strings.Split(text, "\n") {
		key, value, ok := parseEnvLine(raw)
		if !ok {
			key, value = "", ""
		}
		f.lines = append(f.lines, envLine{raw: raw, key: key, value: value})
	}
	return f, nil
}

// Get returns the value of key. When a key appears more than once, the last
// occurrence wins (as with dotenv).
func (f *File) Get(key string) (string, bool) {
	for i := len(f.lines) - 1; i >= 0; i-- {
		if f.lines[i].key == key {
			return f.lines[i].value, true
		}
	}
	return "", false
}

// Set sets key to value in memory: the last line defining key is replaced in
// place, or a line is appended. Every other line is kept as it was. key must
// be a valid variable name ([A-Za-z_][A-Za-z0-9_.-]*); Set panics otherwise,
// since keys are chosen by programs, not read from input.
func (f *File) Set(key, value string) {
	f.set(key, value, formatEnvValue(value))
}

// SetQuoted is Set, but writes the value in double quotes (escaped), as
// vestauth's credentials file has AGENT_UID: AGENT_UID="agent-…".
func (f *File) SetQuoted(key, value string) {
	if !strings.ContainsAny(value, "\"\\\n\r\t") {
		f.set(key, value, `"`+value+`"`)
		return
	}
	f.set(key, value, formatEnvValue(value))
}

func (f *File) set(key, value, formatted string) {
	if !validEnvKey(key) {
		panic(fmt.Sprintf("envfile: invalid variable name %q", key))
	}
	l := envLine{raw: key + "=" + formatted, key: key, value: value}
	for i := len(f.lines) - 1; i >= 0; i-- {
		if f.lines[i].key == key {
			f.lines[i] = l
			return
		}
	}
	f.lines = append(f.lines, l)
}

// Delete removes every line defining key; the other lines are kept as
// they were. Deleting an absent key does nothing.
func (f *File) Delete(key string) {
	kept := f.lines[:0]
	for _, l := range f.lines {
		if l.key != key || key == "" {
			kept = append(kept, l)
		}
	}
	f.lines = kept
}

// Bytes returns the file content that Write would write.
func (f *File) Bytes() []byte {
	var b strings.Builder
	for _, l := range f.lines {
		b.WriteString(l.raw)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// Write writes the file atomically: the content goes to a temporary file in
// the same directory, which is synced, given mode 0600 and renamed over the
// path. Readers never see a partial file.
func (f *File) Write() error {
	dir := filepath.Dir(f.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("envfile: write %s: %w", f.path, err)
	}
	name := tmp.Name()
	fail := func(err error) error {
		tmp.Close()
		os.Remove(name)
		return fmt.Errorf("envfile: write %s: %w", f.path, err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(f.Bytes()); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return fmt.Errorf("envfile: write %s: %w", f.path, err)
	}
	if err := os.Rename(name, f.path); err != nil {
		os.Remove(name)
		return fmt.Errorf("envfile: write %s: %w", f.path, err)
	}
	return nil
}

func validEnvKey(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		switch {
		case c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z':
		case i > 0 && (c >= '0' && c <= '9' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// parseEnvLine parses one line; ok is false for comments, blank lines and
// lines that are not assignments.
func parseEnvLine(raw string) (key, value string, ok bool) {
	s := strings.TrimSpace(raw)
	if s == "" || s[0] == '#' {
		return "", "", false
	}
	if rest, found := strings.CutPrefix(s, "export "); found {
		s = strings.TrimLeft(rest, " \t")
	}
	eq := strings.IndexByte(s, '=')
	if eq < 0 {
		return "", "", false
	}
	key = strings.TrimSpace(s[:eq])
	if !validEnvKey(key) {
		return "", "", false
	}
	v := strings.TrimLeft(s[eq+1:], " \t")
	switch {
	case v == "":
		return key, "", true
	case v[0] == '\'':
		end := strings.IndexByte(v[1:], '\'')
		if end < 0 {
			return "", "", false
		}
		return key, v[1 : 1+end], true
	case v[0] == '"':
		if last := strings.LastIndexByte(v, '"'); last > 0 {
			inner := v[1:last]
			if t := strings.TrimSpace(inner); t != "" && (t[0] == '{' || t[0] == '[') && json.Valid([]byte(t)) {
				return key, inner, true
			}
		}
		val, ok := unquoteDouble(v[1:])
		if !ok {
			return "", "", false
		}
		return key, val, true
	default:
		if i := strings.Index(v, " #"); i >= 0 {
			v = v[:i]
		}
		if i := strings.Index(v, "\t#"); i >= 0 {
			v = v[:i]
		}
		return key, strings.TrimSpace(v), true
	}
}

// unquoteDouble reads a double-quoted value (the opening quote already
// consumed) up to the first unescaped closing quote.
func unquoteDouble(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			return b.String(), true
		case '\\':
			if i+1 >= len(s) {
				return "", false
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '"', '\\', '\'', '$', '`':
				b.WriteByte(s[i])
			default:
				b.WriteByte('\\')
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}

// formatEnvValue quotes value for writing: bare when it is made of safe
// characters; single-quoted when it holds double quotes, backslashes or JSON
// (and no single quote or newline); double-quoted with escapes otherwise.
func formatEnvValue(v string) string {
	if v == "" {
		return ""
	}
	if bareSafe(v) {
		return v
	}
	t := strings.TrimSpace(v)
	jsonish := t != "" && (t[0] == '{' || t[0] == '[')
	if (jsonish || strings.ContainsAny(v, `"\`)) && !strings.ContainsAny(v, "'\n\r") {
		return "'" + v + "'"
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	return `"` + r.Replace(v) + `"`
}

func bareSafe(v string) bool {
	for _, c := range v {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("_-./:@+,%=?&~", c):
		default:
			return false
		}
	}
	return true
}
