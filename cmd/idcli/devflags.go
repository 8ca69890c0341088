package main

import (
	"errors"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/keyfetch"
)

// missingFlags collects the flags a command needs and was not given, so
// that it names them all in one message, never one per run.
type missingFlags []string

// need adds flag when it is needed and not given.
func (m *missingFlags) need(flag string, needed, given bool) {
	if needed && !given && !slices.Contains(*m, flag) {
		*m = append(*m, flag)
	}
}

// String lists the flags: "--a", "--a and --b", "--a, --b and --c".
func (m missingFlags) String() string {
	if len(m) < 2 {
		return strings.Join(m, "")
	}
	return strings.Join(m[:len(m)-1], ", ") + " and " + m[len(m)-1]
}

// localDevFlags returns every local-development flag (--allow-http,
// --allow-private) that fetching the key sets at urls needs and that was
// not given, and the URLs that need one: --allow-http for an http:// URL,
// --allow-private for a host on this machine or a private network, by its
// name or address, or as cause (the refusal, if any) says. A key set on
// this machine needs both, and a command names both at once.
func localDevFlags(urls []string, cause error, allowHTTP, allowPrivate bool) (missing missingFlags, local []string) {
	var ue *keyfetch.UntrustedError
	needHTTP := errors.As(cause, &ue) && ue.HTTP
	needPrivate := errors.Is(cause, keyfetch.ErrPrivateAddress)
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		host := strings.Trim(strings.ToLower(u.Hostname()), "[]")
		private := hint.IsLocalHost(host)
		if a, err := netip.ParseAddr(host); err == nil {
			private = private || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsUnspecified()
		}
		needHTTP = needHTTP || u.Scheme == "http"
		needPrivate = needPrivate || private
		if u.Scheme == "http" || private {
			local = append(local, raw)
		}
	}
	missing.need("--allow-http", needHTTP, allowHTTP)
	missing.need("--allow-private", needPrivate, allowPrivate)
	return missing, local
}

// rerunWith returns the command line that was run (env.args, as a POSIX
// shell reads it) with flags added, before a "--" that ends the flags.
func rerunWith(env *cliEnv, flags missingFlags) string {
	args := slices.Clone(env.args)
	at := slices.Index(args, "--")
	if at < 0 {
		at = len(args)
	}
	args = slices.Insert(args, at, flags...)
	words := []string{"idcli"}
	for _, a := range args {
		words = append(words, shellWord(a))
	}
	return strings.Join(words, " ")
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellWord quotes s for a POSIX shell when it needs quoting.
func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// devRefusal reports whether err is a refusal that a local-development
// flag lifts: an http:// key set, or a private address.
func devRefusal(err error) bool {
	var ue *keyfetch.UntrustedError
	return errors.As(err, &ue) && ue.HTTP || errors.Is(err, keyfetch.ErrPrivateAddress)
}

// trustFlagWords is keyfetch.Config.Validate's error about --trust
// patterns in the command line's words: each entry named by its flag.
func trustFlagWords(err error) string {
	msg := strings.TrimPrefix(err.Error(), "keyfetch: invalid config: ")
	return strings.ReplaceAll(msg, "TrustedHosts entry ", "--trust ")
}

// flagWords rewrites keyfetch's names of its settings, in the messages of
// a refused fetch, into the flags that set them.
var flagWords = strings.NewReplacer("AllowHTTP is off", "no --allow-http", "AllowPrivateNetworks is off", "no --allow-private")
