// Package envflag sets the flags a command line left unset from
// environment variables named after them (--rate-limit-burst: PREFIX_RATE_LIMIT_BURST),
// the way ff.WithEnvVarPrefix names them, and rewords errors about such a
// flag to name the variable it came from.
//
// ff reads os.Getenv only; idcli's commands read their environment through
// a lookup function (tests give each command its own) and from the .env
// file in their working directory, which ff's EnvParser cannot read (the
// agent's credentials share it, in forms it refuses).
package envflag

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// Var returns the variable that sets flag name under prefix: the name in
// upper case with "-", "." and "/" turned into "_", after prefix and "_".
func Var(prefix, name string) string {
	return prefix + "_" + strings.NewReplacer("-", "_", ".", "_", "/", "_").Replace(strings.ToUpper(name))
}

// Document appends the variable of each flag of fs to its usage, "… [env
// PREFIX_NAME]", unless the usage names it already. Call it once every flag
// is defined.
func Document(fs *flag.FlagSet, prefix string) {
	fs.VisitAll(func(f *flag.Flag) {
		if v := Var(prefix, f.Name); !strings.Contains(f.Usage, v) {
			f.Usage += " [env " + v + "]"
		}
	})
}

// Source is a place variables are read from.
type Source struct {
	// Lookup returns the value of a variable; "" counts as unset.
	Lookup func(name string) string
	// Where follows the variable's name in messages: "" for the process
	// environment, " in .env" for a file.
	Where string
}

// First returns the value of the first of names that a source defines,
// every source tried for a name before the next name, with that name and
// the source's Where; "" when none does.
func First(sources []Source, names ...string) (value, name, where string) {
	for _, n := range names {
		for _, s := range sources {
			if v := s.Lookup(n); v != "" {
				return v, n, s.Where
			}
		}
	}
	return "", "", ""
}

// Sources records, by flag name, the variable each flag set from the
// environment came from ("PREFIX_NAME" or "PREFIX_NAME in .env").
type Sources map[string]string

// Apply sets every flag of fs that the command line did not set from the
// first source defining its variable. A value the flag refuses is an error
// naming the variable (not the value).
func Apply(fs *flag.FlagSet, prefix string, sources ...Source) (Sources, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	set := Sources{}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		name := Var(prefix, f.Name)
		for _, s := range sources {
			v := s.Lookup(name)
			if v == "" {
				continue
			}
			// The value is not repeated: it may hold a secret (a URL's
			// password), and the variable is named.
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s%s: %s (--%s)", name, s.Where, setError(err), f.Name))
			}
			set[f.Name] = name + s.Where
			break
		}
	})
	return set, errors.Join(errs...)
}

// setError words the error of a flag's Set: package flag's parsers of
// numbers, booleans and durations say only "parse error".
func setError(err error) string {
	if msg := err.Error(); msg != "parse error" {
		return msg
	}
	return "not a valid value"
}

// Label names where the value of flag name came from: its variable when
// the environment set it, else "--name".
func (s Sources) Label(name string) string {
	if v, ok := s[name]; ok {
		return v
	}
	return "--" + name
}

// Reword replaces, at the start of each line of err, a flag that the
// environment set ("--rate-limit …") by its variable, so the message names
// what the user has to fix.
func (s Sources) Reword(err error) error {
	if err == nil || len(s) == 0 {
		return err
	}
	lines := strings.Split(err.Error(), "\n")
	changed := false
	for i, line := range lines {
		for name, v := range s {
			rest, ok := strings.CutPrefix(line, "--"+name)
			if ok && (rest == "" || !isNameByte(rest[0])) {
				lines[i], changed = v+rest, true
				break
			}
		}
	}
	if !changed {
		return err
	}
	return &reworded{msg: strings.Join(lines, "\n"), err: err}
}

func isNameByte(c byte) bool {
	return c == '-' || c == '_' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// reworded keeps the error it rewords for errors.Is and errors.As.
type reworded struct {
	msg string
	err error
}

func (e *reworded) Error() string { return e.msg }
func (e *reworded) Unwrap() error { return e.err }
