package proxyconfig

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentid/agentid/signer/suggest"
)

// MaxFileSize bounds a configuration file: a larger one is refused before
// it is parsed.
const MaxFileSize = 1 << 20

// Load reads the YAML file at path onto Default. Errors name the file
// (as path is written), and a bad key or value its line and key.
func Load(path string) (*Config, error) {
	return LoadAs(path, path)
}

// LoadAs is Load naming the file display in errors (a path relative to
// where the user is, when path was resolved against another directory).
func LoadAs(path, display string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", display, unwrapPath(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", display, unwrapPath(err))
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a proxy configuration", display, MaxFileSize)
	}
	c, err := Parse(display, b)
	if err != nil {
		return nil, err
	}
	if c.file, err = filepath.Abs(path); err != nil {
		c.file = path
	}
	return c, nil
}

// unwrapPath drops the path an *os.PathError repeats.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Parse reads a YAML configuration named name (for errors) onto Default.
// An empty document is the default configuration. Every error names
// name:LINE and the key; several are joined, one per line.
func Parse(name string, data []byte) (*Config, error) {
	c := Default()
	c.file, c.display = name, name
	c.unterminated = len(data) > 0 && data[len(data)-1] != '\n'
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if line, after, ok := strings.Cut(rest, ": "); ok {
				return nil, fmt.Errorf("%s:%s: %s", name, line, after)
			}
		}
		return nil, fmt.Errorf("%s: %s", name, msg)
	}
	if len(doc.Content) == 0 {
		return c, nil
	}
	d := decoder{file: name, cfg: c}
	d.value(doc.Content[0], reflect.ValueOf(c).Elem(), "")
	if err := errors.Join(d.errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// decoder walks a YAML node onto a Config, recording each key's line.
type decoder struct {
	file string
	cfg  *Config
	errs []error
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	at := fmt.Sprintf("%s:%d", d.file, n.Line)
	if path != "" {
		at += ": " + path
	}
	d.errs = append(d.errs, fmt.Errorf("%s: %s", at, fmt.Sprintf(format, args...)))
}

func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // "key:" with no value leaves the default
	}
	if path != "" {
		// Set directly, not through setOrigin: a file names each path once
		// (twice is refused), parents before their entries, so there is
		// nothing under path to drop, and a scan per node would make a
		// long list quadratic.
		if d.cfg.origins == nil {
			d.cfg.origins = map[string]string{}
		}
		d.cfg.origins[path] = fmt.Sprintf("%s:%d", d.file, n.Line)
	}
	switch v.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.fail(n, path, "want a mapping of keys (%s), got %s", strings.Join(keyNames(v.Type()), ", "), describe(n))
			return
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			sub := k.Value
			if path != "" {
				sub = path + "." + k.Value
			}
			f, ok := fieldByTag(v, k.Value)
			if !ok {
				d.fail(k, "", "unknown key %s%s; the keys%s are: %s", describe(&yaml.Node{Kind: yaml.ScalarNode, Value: sub}), didYouMean(k.Value, keyNames(v.Type())), under(path), strings.Join(keyNames(v.Type()), ", "))
				continue
			}
			if seen[k.Value] {
				d.fail(k, sub, "given twice")
				continue
			}
			seen[k.Value] = true
			d.value(val, f, sub)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if v.Type().Elem().Kind() == reflect.String && n.Kind == yaml.ScalarNode {
				// A single value stands for a list of one.
				v.Set(reflect.ValueOf([]string{n.Value}))
				return
			}
			d.fail(n, path, "want a list, got %s", describe(n))
			return
		}
		out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.value(item, out.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(out)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "want a string, got %s", describe(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		b, err := strconv.ParseBool(n.Value)
		if n.Kind != yaml.ScalarNode || err != nil || n.Tag != "!!bool" {
			d.fail(n, path, "want true or false, got %s", describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Int:
		i, err := strconv.Atoi(n.Value)
		if n.Kind != yaml.ScalarNode || err != nil || n.Tag != "!!int" {
			d.fail(n, path, "want a whole number, got %s", describe(n))
			return
		}
		v.SetInt(int64(i))
	}
}

func under(path string) string {
	if path == "" {
		return ""
	}
	return " of " + path
}

// describe names what a node holds, for "want X, got Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 60 {
		v = v[:60] + "…"
	}
	return strconv.Quote(v)
}

func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("yaml") == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// didYouMean returns ` (did you mean "x"?)` for the candidates close to
// typed, or "".
func didYouMean(typed string, candidates []string) string {
	close := suggest.Close(typed, candidates)
	if len(close) == 0 {
		return ""
	}
	q := make([]string, len(close))
	for i, c := range close {
		q[i] = strconv.Quote(c)
	}
	return " (did you mean " + strings.Join(q, " or ") + "?)"
}
