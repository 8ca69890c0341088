package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentid/agentid/cmd/idcli/internal/hint"
	"github.com/agentid/agentid/signer"
)

// parseInterspersed parses the flags of fs wherever they appear in args,
// what ffcli left after the command's leading flags, and returns the
// positional arguments in order. ffcli (like package flag) stops at the
// first positional argument, but users type `idcli agent curl URL -X POST`.
// n is the number of positional arguments the command takes (-1: any).
//
// An argument may begin with "-": a key id is base64url, so about one in 64
// does (`idcli server keys revoke UID -KID`). A word that begins with "-"
// is a flag when it names one of fs (or is -h, --help); a word that names
// none is an argument when the command takes that many (n), and otherwise
// an unknown flag, so that a mistyped flag stays an error. Everything after
// "--" is an argument, whether this parser or ffcli (before the first
// argument) met it; a flag's value may be "--".
//
// -h or --help returns flag.ErrHelp without printing: ffcli prints the
// command's usage once when Exec returns it.
func (env *cliEnv) parseInterspersed(fs *flag.FlagSet, args []string, n int) ([]string, error) {
	usage := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = usage }()
	if env.terminated(fs, args) {
		return args, nil
	}
	var pos, dashed []string
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		f, named := flagNamed(fs, a)
		if !named {
			if len(a) > 1 && a[0] == '-' {
				dashed = append(dashed, a)
			}
			pos = append(pos, a)
			args = args[1:]
			continue
		}
		k := 1 // the flag, and its value when it is the next word
		if f != nil && !isBoolFlag(f) && !strings.Contains(a, "=") && len(args) > 1 {
			k = 2
		}
		if err := fs.Parse(args[:k]); err != nil {
			return nil, err
		}
		args = args[k:]
	}
	if len(dashed) > 0 && (n < 0 || len(pos) > n) {
		// Some are mistyped flags: report the one most like a flag of
		// fs, else the last ("UID -KID --jsn", "UID --jsn -KID").
		typo := dashed[len(dashed)-1]
		for _, d := range dashed {
			if name, _, _ := strings.Cut(strings.TrimLeft(d, "-"), "="); suggestFlag(name, fs) != "" {
				typo = d
				break
			}
		}
		if err := fs.Parse([]string{typo}); err != nil {
			return nil, err
		}
	}
	return pos, nil
}

// flagNamed returns the flag of fs that word (-name, --name, -name=value)
// names, and whether it names one: -h and --help name the help, which
// package flag answers without a flag of that name. A word that does not
// begin with "-" names none.
func flagNamed(fs *flag.FlagSet, word string) (*flag.Flag, bool) {
	if len(word) < 2 || word[0] != '-' {
		return nil, false
	}
	name := strings.TrimPrefix(strings.TrimPrefix(word, "-"), "-")
	name, _, _ = strings.Cut(name, "=")
	if f := fs.Lookup(name); f != nil {
		return f, true
	}
	return nil, name == "h" || name == "help"
}

// terminated reports whether ffcli, parsing the command's leading flags,
// stopped at "--": args, what it left, then follow a "--" of the command
// line (env.args) that was not a flag's value. Package flag drops that
// "--", so args alone cannot tell.
func (env *cliEnv) terminated(fs *flag.FlagSet, args []string) bool {
	raw := env.args
	k := len(raw) - len(args)
	if k < 1 || !slices.Equal(raw[k:], args) || raw[k-1] != "--" {
		return false
	}
	if k >= 2 && !strings.Contains(raw[k-2], "=") {
		if f, _ := flagNamed(fs, raw[k-2]); f != nil && !isBoolFlag(f) {
			return false // "--db --": the value of --db
		}
	}
	return true
}

// noArgs refuses the positional arguments of command cmd ("server
// start"), which takes none.
func noArgs(cmd string, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments (got %q)", cmd, args[0])
	}
	return nil
}

// positional is parseInterspersed for a command that takes exactly n
// positional arguments: with any other number it prints "usage: " and
// usage to stderr and fails with the error want.
func (env *cliEnv) positional(fs *flag.FlagSet, args []string, n int, usage, want string) ([]string, error) {
	pos, err := env.parseInterspersed(fs, args, n)
	if err != nil {
		return nil, err
	}
	if len(pos) != n {
		fmt.Fprintln(env.Stderr, "usage:", usage)
		return nil, errors.New(want)
	}
	return pos, nil
}

// envDisplay names the credentials file the way the output lines do:
// relative to the working directory when it lies inside it (".env").
func envDisplay(env *cliEnv, path string) string {
	if rel, err := filepath.Rel(env.Dir, path); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return path
}

// writeJSON prints v as JSON: compact, or indented by two spaces when pretty.
func writeJSON(w io.Writer, v any, pretty bool) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if pretty {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

// stringsFlag is a repeatable string flag (-H 'K: V' -H …).
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ", ") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

// componentsUsage is the help of --components.
const componentsUsage = "comma-separated components to sign, e.g. @method,@authority,@path (default: @authority; the Signature-Agent member is added unless --legacy; content-digest also sends Content-Digest)"

// headersComponentsUsage is the help of agent headers' --components: it
// signs no body, so content-digest is not offered.
const headersComponentsUsage = "comma-separated components to sign, e.g. @method,@authority,@path (default: @authority; the Signature-Agent member is added unless --legacy; not content-digest, which needs a body: use agent curl -d BODY --components …)"

// parseComponents reads --components: component names separated by commas,
// such as @method,@authority,@path,content-digest. "" means the default
// profile (nil).
func parseComponents(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for _, c := range strings.Split(s, ",") {
		if c = strings.TrimSpace(c); c == "" {
			return nil, fmt.Errorf("--components %q: an empty component name", s)
		}
		out = append(out, strings.ToLower(c))
	}
	return out, nil
}

// checkURL refuses a URL without an http or https scheme or without a
// host; when the scheme is missing it names the URL the user most likely
// meant.
func checkURL(cmd, raw string) error {
	u, err := url.Parse(raw)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return nil
	}
	if h := hint.Scheme(raw); h != "" {
		return fmt.Errorf("%s: invalid URL %q: no scheme%s", cmd, raw, h)
	}
	return fmt.Errorf("%s: invalid URL %q: want http(s)://host/path", cmd, raw)
}

// standardMethods are the methods of RFC 9110 §9 and PATCH (RFC 5789).
var standardMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
	http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch,
}

// normalizeMethod returns the request method m as it is sent and signed.
// Methods are case-sensitive (RFC 9110 §9.1) and servers know the standard
// ones in upper case only, so a standard method typed in any case is
// upper-cased ("get" → "GET"); any other method is kept as typed. A method
// that is not an HTTP token is refused, with cmd prefixing the error.
func normalizeMethod(cmd, m string) (string, error) {
	if !signer.IsToken(m) {
		return "", fmt.Errorf("%s: invalid method %q: want a method such as GET or POST", cmd, m)
	}
	if up := strings.ToUpper(m); slices.Contains(standardMethods, up) {
		return up, nil
	}
	return m, nil
}

// legacyUsage and metadataUsage are the help of --legacy and --metadata.
const (
	legacyUsage   = `sign the pre-protocol-01 shape: Signature-Agent sent but not covered, only @authority signed (what vestauth 0.21.1 and npm web-bot-auth 0.1.3 verify; a strict protocol-01 verifier refuses it)`
	metadataUsage = "signed agent metadata 'key=value' (repeatable): sent in Signed-Agent-Metadata, which the signature then covers"
)

// parseMetadata reads --metadata key=value flags into a map; keys are
// checked by the signer.
func parseMetadata(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	md := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--metadata %q: want key=value", kv)
		}
		if _, dup := md[k]; dup {
			return nil, fmt.Errorf("--metadata: key %q given twice", k)
		}
		md[k] = v
	}
	return md, nil
}
