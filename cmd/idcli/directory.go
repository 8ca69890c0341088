package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

// newDirectoryCmd is `idcli directory …`: key directory tools.
func newDirectoryCmd(env *cliEnv) *ffcli.Command {
	return &ffcli.Command{
		Name:        "directory",
		ShortUsage:  "idcli directory <check> [flags]",
		ShortHelp:   "inspect signature agents' key directories",
		FlagSet:     newFlagSet("idcli directory", env),
		Subcommands: []*ffcli.Command{newDirectoryCheckCmd(env)},
		Exec:        groupExec("idcli directory"),
	}
}

const directoryCheckUsage = "idcli directory check URL [--allow-http] [--allow-private] [--json]"

// newDirectoryCheckCmd is `idcli directory check URL`: one uncached fetch
// of a key directory, reported the way a verifier would judge it.
func newDirectoryCheckCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli directory check", env)
	allowHTTP := fs.Bool("allow-http", false, "accept an http:// URL (local development only)")
	allowPrivate := fs.Bool("allow-private", false, "connect to loopback and private addresses (local development only)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	return &ffcli.Command{
		Name:       "check",
		ShortUsage: directoryCheckUsage,
		ShortHelp:  "fetch a key directory and report every problem a verifier would find",
		LongHelp: "URL is a signature agent origin (https://agent-x.example) or its full\n" +
			"directory URL (…" + signer.DirectoryPath + ").\n" +
			"The directory is fetched once, without cache, under the same rules as the\n" +
			"middleware's key fetcher: status, media type, size, JSON shape, each key's\n" +
			"validity and kid = RFC 7638 thumbprint; cache headers are judged too.\n" +
			"Exit status 0 when every key is usable (warnings allowed), 1 otherwise.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if len(pos) != 1 {
				fmt.Fprintln(env.Stderr, "usage:", directoryCheckUsage)
				return errors.New("directory check: want exactly one URL")
			}
			origin, host, err := directoryOrigin(pos[0])
			if err != nil {
				return err
			}
			f := keyfetch.New(keyfetch.Config{
				TrustedHosts:         []string{host},
				AllowHTTP:            *allowHTTP,
				AllowPrivateNetworks: *allowPrivate,
				NegativeTTL:          -1,
			})
			r, cerr := f.Check(ctx, origin)
			if r == nil {
				// Refused before any I/O (scheme or host).
				r = &keyfetch.Report{URL: origin + signer.DirectoryPath, Problems: []string{cerr.Error()}}
			}
			hint := directoryHint(cerr)
			if *asJSON {
				if err := writeJSON(env.Stdout, newDirectoryReport(r, hint), true); err != nil {
					return err
				}
			} else {
				printDirectoryReport(env, r, hint)
			}
			if !r.OK() {
				return exitCode(1)
			}
			return nil
		},
	}
}

// directoryOrigin accepts an origin or a full directory URL and returns the
// origin and its host[:port] (the one host the check trusts).
func directoryOrigin(raw string) (origin, host string, err error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", "", fmt.Errorf("directory check: invalid URL %q: want https://host or https://host%s", raw, signer.DirectoryPath)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("directory check: %q: a directory URL has no query or fragment", raw)
	}
	if p := u.EscapedPath(); p != "" && p != "/" && p != signer.DirectoryPath {
		return "", "", fmt.Errorf("directory check: %q: the path must be empty or %s", raw, signer.DirectoryPath)
	}
	return strings.ToLower(u.Scheme) + "://" + u.Host, u.Host, nil
}

// directoryHint suggests the flag that addresses a refusal, if one does.
func directoryHint(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, signer.ErrUntrustedAgent) && strings.Contains(err.Error(), "AllowHTTP is off"):
		return "the URL uses http://; add --allow-http for local development"
	case errors.Is(err, keyfetch.ErrPrivateAddress):
		return "the host is on a private address; add --allow-private for local development"
	}
	return ""
}

// directoryReport is the --json output of `idcli directory check`.
type directoryReport struct {
	URL          string       `json:"url"`
	OK           bool         `json:"ok"`
	Status       int          `json:"status"`
	ContentType  string       `json:"content_type"`
	CacheControl string       `json:"cache_control"`
	ETag         string       `json:"etag"`
	TTLSeconds   float64      `json:"ttl_seconds"`
	TTLNote      string       `json:"ttl_note,omitempty"`
	Keys         []signer.JWK `json:"keys"`
	Problems     []string     `json:"problems"`
	Warnings     []string     `json:"warnings"`
	Hint         string       `json:"hint,omitempty"`
}

func newDirectoryReport(r *keyfetch.Report, hint string) directoryReport {
	d := directoryReport{
		URL: r.URL, OK: r.OK(), Status: r.StatusCode,
		ContentType: r.ContentType, CacheControl: r.CacheControl, ETag: r.ETag,
		TTLSeconds: r.TTL.Seconds(), TTLNote: r.TTLNote,
		Keys: []signer.JWK{}, Problems: []string{}, Warnings: []string{}, Hint: hint,
	}
	for _, k := range r.Keys {
		d.Keys = append(d.Keys, k.JWK.Public())
	}
	d.Problems = append(d.Problems, r.Problems...)
	d.Warnings = append(d.Warnings, r.Warnings...)
	return d
}

func printDirectoryReport(env *cliEnv, r *keyfetch.Report, hint string) {
	w := env.Stdout
	fmt.Fprintf(w, "• GET %s\n", r.URL)
	if r.StatusCode != 0 {
		fmt.Fprintf(w, "• status %d, Content-Type %s, Cache-Control %s, ETag %s\n",
			r.StatusCode, dirOrNone(r.ContentType), dirOrNone(r.CacheControl), dirOrNone(r.ETag))
	}
	for _, k := range r.Keys {
		fmt.Fprintf(w, "✔ key %s (Ed25519)\n", k.JWK.Kid)
	}
	for _, p := range r.Warnings {
		fmt.Fprintf(w, "! %s\n", p)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "✘ %s\n", p)
	}
	if hint != "" {
		fmt.Fprintf(w, "  hint: %s\n", hint)
	}
	switch {
	case !r.OK():
		fmt.Fprintf(w, "✘ directory has %s\n", dirPlural(len(r.Problems), "problem"))
	case len(r.Warnings) > 0:
		fmt.Fprintf(w, "✔ directory usable: %s, cached for %v (%s)\n", dirPlural(len(r.Keys), "key"), r.TTL, dirPlural(len(r.Warnings), "warning"))
	default:
		fmt.Fprintf(w, "✔ directory OK: %s, cached for %v\n", dirPlural(len(r.Keys), "key"), r.TTL)
	}
}

func dirOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func dirPlural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
