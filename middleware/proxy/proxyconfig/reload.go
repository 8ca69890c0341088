package proxyconfig

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Reload applies c, the configuration read again (the same file under the
// same flags), when it is one the proxy would start with and differs from
// the configuration in force only in the reloadable keys (mode, routes,
// allow, deny, limits). The swap is atomic: requests already deciding
// finish under the old rules, later ones get the new; limits left as they
// were keep their buckets.
//
// A file caught while an editor or a deploy rewrites it in place is empty
// or cut short, and may still be valid YAML, so Reload refuses c, changing
// nothing, when
//   - its file looks cut short: it does not end with a newline (CheckComplete);
//   - its file leaves out a key the file in force sets: a reload never drops
//     a key, clearing one takes an explicit empty value ([] or "") or a
//     restart ("key:" with nothing after it is left out: it is what a cut
//     after a key's name looks like);
//   - it does not validate as Build validates;
//   - it changes a key that needs a restart (Key.Reloadable false): none of
//     it is applied, so the configuration in force stays one piece.
//
// The error says which rule refused c and names the keys (and the lines of
// the file in force). Reload needs a Proxy built Reloadable or with rules.
func (p *Proxy) Reload(c *Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate.Load() == nil {
		return errors.New("this proxy was built without rules and not Reloadable: nothing can be reloaded")
	}
	old := p.cfg
	var errs []error
	if err := c.CheckComplete(); err != nil {
		errs = append(errs, err)
	}
	if left := leftOut(old, c); len(left) > 0 {
		empty := " is empty (or only comments):"
		for _, o := range c.origins {
			if !strings.HasPrefix(o, "--") {
				empty = "" // a key from the file
				break
			}
		}
		errs = append(errs, fmt.Errorf("%s%s leaves out keys the file in force sets: %s: a file cut short while it is written looks like this, so a reload does not drop a key; give it an explicit empty value ([] or \"\") to clear it, or restart",
			fileName(c), empty, strings.Join(left, ", ")))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	plan, err := c.validate(p.opts.Embedded)
	if err != nil {
		return err
	}
	if changed := restartKeysChanged(old, c); len(changed) > 0 {
		return fmt.Errorf("%s changes keys that take effect only on a restart: %s: nothing was applied; restart to apply them, or put them back to reload the rest",
			fileName(c), strings.Join(changed, ", "))
	}
	g, err := p.newGate(plan.Rules, c.Limits) // sets p.limiter, p.limits and p.where only when it succeeds
	if err != nil {
		return err
	}
	p.gate.Store(g)
	p.cfg = c.Clone()
	p.plan.Rules, p.plan.Mode = plan.Rules, plan.Mode
	return nil
}

// leftOut lists the keys (as "key (was FILE:LINE)") that old's file set and
// c's does not. A key a flag set has the same flag in both, or none.
func leftOut(old, c *Config) []string {
	var out []string
	for _, k := range Keys() {
		was := old.origins[k.Name]
		if was == "" || strings.HasPrefix(was, "--") {
			continue
		}
		if c.origins[k.Name] == "" {
			out = append(out, k.Name+" (was "+was+")")
		}
	}
	return out
}

// restartKeysChanged lists the keys that need a restart whose values
// differ between old and c (an empty list and no list are the same).
func restartKeysChanged(old, c *Config) []string {
	var out []string
	for _, k := range Keys() {
		if k.Reloadable {
			continue
		}
		a, _ := old.field(k.Name)
		b, _ := c.field(k.Name)
		if a.Kind() == reflect.Slice && a.Len() == 0 && b.Len() == 0 {
			continue
		}
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			out = append(out, k.Name)
		}
	}
	return out
}

// fileName names c's file in a message: the file as given, or "the
// configuration" for one not read from a file.
func fileName(c *Config) string {
	if c.display != "" {
		return c.display
	}
	return "the configuration"
}

// CheckComplete reports a file that looks cut short: non-empty and not
// ending with a newline, as a file caught while it is written is (editors
// and deploy tools end a file with one). A start takes such a file; Reload
// refuses it, and `idcli proxy --check` reports it.
func (c *Config) CheckComplete() error {
	if !c.unterminated {
		return nil
	}
	return fmt.Errorf("%s: does not end with a newline, as a file cut short while it is written: a reload refuses it; end the file with a newline", fileName(c))
}
