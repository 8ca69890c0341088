package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentid/agentid/signer"
)

// parseInterspersed parses the flags of fs wherever they appear in args and
// returns the positional arguments in order. ffcli (like package flag) stops
// at the first positional argument, but users type
// `idcli agent curl URL -X POST`. Everything after "--" is positional.
//
// -h or --help returns flag.ErrHelp without printing: ffcli prints the
// command's usage once when Exec returns it.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	usage := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = usage }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// positional is parseInterspersed for a command that takes exactly n
// positional arguments: with any other number it prints "usage: " and
// usage to stderr and fails with the error want.
func (env *cliEnv) positional(fs *flag.FlagSet, args []string, n int, usage, want string) ([]string, error) {
	pos, err := parseInterspersed(fs, args)
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
	if hint := schemeHint(raw); hint != "" {
		return fmt.Errorf("%s: invalid URL %q: no scheme%s", cmd, raw, hint)
	}
	return fmt.Errorf("%s: invalid URL %q: want http(s)://host/path", cmd, raw)
}

// schemeHint names the URL that raw, when it lacks a scheme, most likely
// stands for, as " (did you mean …?)"; else "".
func schemeHint(raw string) string {
	if strings.Contains(raw, "://") || raw == "" || strings.HasPrefix(raw, "/") {
		return ""
	}
	return " (did you mean " + withScheme(raw) + "?)"
}

// withScheme prefixes raw with http:// for a host on this machine
// (localhost, *.localhost, a loopback address) and https:// otherwise.
func withScheme(raw string) string {
	host, _, _ := strings.Cut(raw, "/")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if isLocalHost(strings.Trim(strings.ToLower(host), "[]")) {
		return "http://" + raw
	}
	return "https://" + raw
}

// isLocalHost reports whether host, a lowercase host name or address
// without port or brackets, names this machine: localhost, a *.localhost
// name or a loopback address.
func isLocalHost(host string) bool {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.IsLoopback()
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
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
