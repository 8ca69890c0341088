package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agentid/agentid/middleware/proxy/proxyconfig"
)

// registerProxyConfig adds --config and --check to the flags of `idcli
// proxy`.
func registerProxyConfig(fs *flag.FlagSet, f *proxyFlags) {
	fs.StringVar(&f.config, "config", "", "YAML file with the proxy's settings (every flag is a key; flags on the command line win), per-route modes, allow and deny lists and per-agent rate limits, reread on SIGHUP: see docs/proxy.md")
	fs.BoolVar(&f.check, "check", false, "validate the flags and --config file, print the effective configuration (secrets masked) and exit: 0 when valid")
}

// resolve reads --config (if set) and puts the flags given on the command
// line over it; on SIGHUP it runs again. Errors name the file, line and
// key of a bad value in the file, or the flag of a bad flag.
func (f *proxyFlags) resolve(env *cliEnv) (*proxyconfig.Config, error) {
	cfg := proxyconfig.Default()
	if f.config != "" {
		file := f.config
		if !filepath.IsAbs(file) && env.Dir != "" {
			file = filepath.Join(env.Dir, file)
		}
		var err error
		if cfg, err = proxyconfig.LoadAs(file, f.config); err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil, fmt.Errorf("--config %w", err)
			}
			return nil, err
		}
	}
	cfg.UseFlagNames()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(f.settings)) {
		if sf := f.settings[name]; len(sf.values) > 0 {
			errs = append(errs, cfg.SetFlag(name, sf.values))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkProxyConfig is --check: it validates cfg without listening or
// dialing, and prints the effective configuration on stdout.
func checkProxyConfig(env *cliEnv, cfg *proxyconfig.Config) error {
	if _, err := cfg.Validate(); err != nil {
		return err
	}
	if err := cfg.CheckComplete(); err != nil {
		return err // --check answers for a reload too
	}
	src := "flags and defaults"
	if cfg.File() != "" {
		src = envDisplay(env, cfg.File()) + ", flags and defaults"
	}
	fmt.Fprintf(env.Stdout, "# idcli proxy: effective configuration (from %s; secrets masked)\n%s", src, cfg.Effective())
	fmt.Fprintln(env.Stderr, "configuration OK")
	return nil
}

// reloadOnHangup rereads --config on each SIGHUP until ctx ends (or stop
// is called) and applies its rules, lists and limits; a file refused keeps
// the configuration in force, and the log says why. Flags given on the
// command line still win.
func reloadOnHangup(ctx context.Context, env *cliEnv, f proxyFlags, p *proxyconfig.Proxy) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-hup:
				reloadProxyConfig(env, f, p)
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}

// reloadProxyConfig rereads the file once and applies it, or logs why it
// was refused (proxyconfig.Proxy.Reload: a file that would not start, that
// looks cut short, that leaves out a key the file in force sets, or that
// changes a key needing a restart), keeping the configuration in force.
func reloadProxyConfig(env *cliEnv, f proxyFlags, p *proxyconfig.Proxy) {
	log := p.Logger()
	cfg, err := f.resolve(env)
	if err == nil {
		err = p.Reload(cfg)
	}
	if err != nil {
		log.Error("reload: the file was refused; the configuration in force is kept", "file", f.config, "error", oneLine(err))
		return
	}
	summary := p.Summary()
	log.Info("reload: rules, lists and limits applied", "file", f.config, "rules", strings.TrimPrefix(summary[len(summary)-1], "• "))
}

// oneLine joins the lines of a joined error with "; ", for a log line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
