package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/agentid/agentid/cmd/idcli/internal/cfrules"
	"github.com/agentid/agentid/keyfetch"
	"github.com/agentid/agentid/signer"
)

const directoryCheckUsage = "idcli directory check URL [--type directory|jwks_uri|cimd] [--trust PATTERN]… [--allow-http] [--allow-private] [--json]"

// newDirectoryCheckCmd is `idcli directory check URL`: one uncached fetch
// of a key set, reported the way a verifier would judge it.
func newDirectoryCheckCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli directory check", env)
	typ := fs.String("type", "", "what URL is, as a Signature-Agent member's ;type says: directory (the default), jwks_uri (a JSON Web Key Set) or cimd (a Signature Agent Card)")
	var trust stringsFlag
	fs.Var(&trust, "trust", "another host whose documents may be fetched, such as a card's jwks_uri host: exact host[:port] or *.suffix (repeatable; URL's own host is always trusted)")
	allowHTTP := fs.Bool("allow-http", false, "accept http:// URLs (local development only)")
	allowPrivate := fs.Bool("allow-private", false, "connect to loopback and private addresses, resolving *.localhost to loopback (local development only)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	return &ffcli.Command{
		Name:       "check",
		ShortUsage: directoryCheckUsage,
		ShortHelp:  "fetch a key set and report every problem a verifier would find",
		LongHelp: "URL is a Signature-Agent value: an origin (https://agent-x.example) means its\n" +
			"well-known directory (…" + signer.DirectoryPath + "); a URL with a path is\n" +
			"fetched as given. --type says what it holds, as a member's ;type parameter\n" +
			"does. The key set is fetched once, without cache, under the same rules as\n" +
			"the middleware's key fetcher: status, media type, size, JSON shape, each\n" +
			"key's validity (Ed25519, RSA or P-256) and, at a well-known directory, kid =\n" +
			"RFC 7638 thumbprint; a signed response's signature is checked and cache\n" +
			"headers are judged too. For a directory, each key is also judged by the rules\n" +
			"of Cloudflare's key-directory validator (a signature per key: tag\n" +
			"http-message-signatures-directory, keyid = thumbprint, created/expires,\n" +
			"covering \"@authority\";req, unexpired, verifying; an https:// URL), with\n" +
			"whether the signature binds the body (content-digest); these are reported,\n" +
			"and do not change the exit status.\n" +
			"Exit status 0 when every key is usable (warnings allowed), 1 otherwise.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := env.positional(fs, args, 1, directoryCheckUsage, "directory check: want exactly one URL")
			if err != nil {
				return err
			}
			set, host, err := checkedKeySet(pos[0], *typ)
			if err != nil {
				return err
			}
			kc := keyfetch.Config{
				TrustedHosts:         append([]string{host}, trust...),
				AllowHTTP:            *allowHTTP,
				AllowPrivateNetworks: *allowPrivate,
				NegativeTTL:          -1,
			}
			if err := kc.Validate(); err != nil {
				return fmt.Errorf("directory check: %s", trustFlagWords(err))
			}
			r, cerr := keyfetch.New(kc).CheckKeySet(ctx, set)
			if r == nil {
				// Refused before any I/O (scheme or host).
				r = &keyfetch.Report{URL: set.URL, Kind: set.Kind, WellKnown: set.WellKnown, Problems: []string{cerr.Error()}}
			}
			for i, p := range r.Problems {
				r.Problems[i] = flagWords.Replace(p)
			}
			hint := fetchHint(cerr)
			if missing, _ := localDevFlags([]string{set.URL}, cerr, *allowHTTP, *allowPrivate); devRefusal(cerr) && len(missing) > 0 {
				hint = set.URL + " is a local development key set: it needs " + missing.String() + "; run: " + rerunWith(env, missing)
			}
			if h := localSchemeHint(pos[0], func(with string) string { return "check " + with + " with --allow-http --allow-private" }); h != "" && !r.OK() {
				hint = h
			}
			cf := cfrules.Check(r, time.Now())
			if *asJSON {
				if err := writeJSON(env.Stdout, newDirectoryReport(r, hint, cf), true); err != nil {
					return err
				}
			} else {
				printDirectoryReport(env, r, hint, cf)
			}
			if !r.OK() {
				return exitCode(1)
			}
			return nil
		},
	}
}

// checkedKeySet resolves URL and --type as a Signature-Agent member would
// be resolved, and returns the key set and the host[:port] of its URL
// (which the check trusts).
func checkedKeySet(raw, typ string) (signer.KeySet, string, error) {
	switch typ {
	case "", "directory", "jwks_uri", "cimd":
	default:
		return signer.KeySet{}, "", fmt.Errorf("directory check: --type %q: want directory, jwks_uri or cimd", typ)
	}
	if strings.ContainsAny(raw, "#") {
		return signer.KeySet{}, "", fmt.Errorf("directory check: %q: a key-set URL has no fragment", raw)
	}
	set, err := signer.AgentMember{Value: raw, Type: typ}.KeySet()
	if err != nil {
		return signer.KeySet{}, "", fmt.Errorf("directory check: invalid URL %q: want https://host or a key-set URL such as https://host/keys.json (%s)", raw, strings.TrimPrefix(err.Error(), "signer: "))
	}
	u, err := url.Parse(set.URL)
	if err != nil || u.Host == "" {
		return signer.KeySet{}, "", fmt.Errorf("directory check: invalid URL %q", raw)
	}
	return set, u.Host, nil
}

// fetchHint suggests the flag that addresses a refusal by keyfetch (of
// directory check, or inside a verification), if one does.
func fetchHint(err error) string {
	var ue *keyfetch.UntrustedError
	untrusted := errors.As(err, &ue)
	switch {
	case untrusted && ue.HTTP:
		return "the URL uses http://; add --allow-http for local development"
	case untrusted && ue.CardJWKS && ue.Host != "":
		return "the Signature Agent Card names its keys at another host: add --trust " + ue.Host + " to fetch them"
	case errors.Is(err, keyfetch.ErrPrivateAddress):
		return "the host is on a private address; add --allow-private for local development"
	}
	return ""
}

// directoryReport is the --json output of `idcli directory check`.
type directoryReport struct {
	URL          string         `json:"url"`
	Kind         string         `json:"kind"` // directory, jwks_uri or cimd
	WellKnown    bool           `json:"well_known"`
	JWKSURI      string         `json:"jwks_uri,omitempty"`
	OK           bool           `json:"ok"`
	Status       int            `json:"status"`
	ContentType  string         `json:"content_type"`
	CacheControl string         `json:"cache_control"`
	ETag         string         `json:"etag"`
	TTLSeconds   float64        `json:"ttl_seconds"`
	TTLNote      string         `json:"ttl_note,omitempty"`
	Signed       bool           `json:"signed"`
	Verified     bool           `json:"verified"`
	Authentic    bool           `json:"authenticated"` // a verified directory signature covers the body: the keys are vouched for
	SignedBy     []string       `json:"signed_by,omitempty"`
	Keys         []directoryKey `json:"keys"`
	Problems     []string       `json:"problems"`
	Warnings     []string       `json:"warnings"`
	Hint         string         `json:"hint,omitempty"`
	// Cloudflare is what Cloudflare's key-directory validator checks, per
	// key (directories only).
	Cloudflare *cfrules.Report `json:"cloudflare,omitempty"`
}

// directoryKey is one usable key of a checked key set.
type directoryKey struct {
	Kid        string     `json:"kid"`
	Algorithm  string     `json:"alg"`
	Thumbprint string     `json:"thumbprint"`
	PublicJWK  signer.JWK `json:"public_jwk"`
}

func newDirectoryReport(r *keyfetch.Report, hint string, cf *cfrules.Report) directoryReport {
	d := directoryReport{
		URL: r.URL, Kind: r.Kind.String(), WellKnown: r.WellKnown, JWKSURI: r.JWKSURI, OK: r.OK(), Status: r.StatusCode,
		ContentType: r.ContentType, CacheControl: r.CacheControl, ETag: r.ETag,
		TTLSeconds: r.TTL.Seconds(), TTLNote: r.TTLNote,
		Signed: r.Signed, Verified: r.Verified, Authentic: r.Authenticated, SignedBy: r.SignedBy,
		Keys: []directoryKey{}, Problems: []string{}, Warnings: []string{}, Hint: hint, Cloudflare: cf,
	}
	for _, k := range r.Keys {
		d.Keys = append(d.Keys, directoryKey{Kid: k.JWK.Kid, Algorithm: k.Algorithm(), Thumbprint: k.Thumbprint, PublicJWK: k.JWK.Public()})
	}
	d.Problems = append(d.Problems, r.Problems...)
	d.Warnings = append(d.Warnings, r.Warnings...)
	return d
}

// keySetNoun names what a report describes.
func keySetNoun(r *keyfetch.Report) string {
	switch r.Kind {
	case signer.KindJWKS:
		return "JWKS"
	case signer.KindCard:
		return "card"
	}
	return "directory"
}

func printDirectoryReport(env *cliEnv, r *keyfetch.Report, hint string, cf *cfrules.Report) {
	w := env.Stdout
	what := map[signer.KeySetKind]string{signer.KindDirectory: "key directory", signer.KindJWKS: "JSON Web Key Set", signer.KindCard: "Signature Agent Card"}[r.Kind]
	if r.WellKnown {
		what += " at the well-known path: keyids must be thumbprints"
	}
	fmt.Fprintf(w, "• GET %s (%s)\n", r.URL, what)
	if r.StatusCode != 0 {
		fmt.Fprintf(w, "• status %d, Content-Type %s, Cache-Control %s, ETag %s\n",
			r.StatusCode, dirOrNone(r.ContentType), dirOrNone(r.CacheControl), dirOrNone(r.ETag))
	}
	if r.JWKSURI != "" {
		fmt.Fprintf(w, "• the card's keys are at jwks_uri %s\n", r.JWKSURI)
	}
	for _, k := range r.Keys {
		tp := "thumbprint " + k.Thumbprint
		if k.JWK.Kid == k.Thumbprint {
			tp = "kid = thumbprint"
		}
		fmt.Fprintf(w, "✔ key %s (%s, %s)\n", k.JWK.Kid, k.Algorithm(), tp)
	}
	switch {
	case r.Signed && r.Verified && r.Authenticated:
		fmt.Fprintf(w, "✔ response signed (%s) by %s, covers the body: the keys are authenticated\n", keyfetch.DirectorySignatureTag, strings.Join(r.SignedBy, ", "))
	case r.Signed && r.Verified:
		fmt.Fprintf(w, "! response signed (%s) by %s over the authority only (keys not authenticated): cover content-digest too, or verifiers that require signed key sets refuse it\n", keyfetch.DirectorySignatureTag, strings.Join(r.SignedBy, ", "))
	case r.Signed:
		fmt.Fprintf(w, "✘ response signed (%s), but the signature does not verify\n", keyfetch.DirectorySignatureTag)
	case len(r.Keys) > 0:
		fmt.Fprintf(w, "• response unsigned (accepted unless a verifier requires signed key sets)\n")
	}
	cfrules.Print(env.Stdout, cf)
	for _, p := range r.Warnings {
		fmt.Fprintf(w, "! %s\n", p)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "✘ %s\n", p)
	}
	if hint != "" {
		fmt.Fprintf(w, "  hint: %s\n", hint)
	}
	noun := keySetNoun(r)
	switch {
	case !r.OK():
		fmt.Fprintf(w, "✘ %s has %s\n", noun, dirPlural(len(r.Problems), "problem"))
	case len(r.Warnings) > 0:
		fmt.Fprintf(w, "✔ %s usable: %s, cached for %v (%s)\n", noun, dirPlural(len(r.Keys), "key"), r.TTL, dirPlural(len(r.Warnings), "warning"))
	default:
		fmt.Fprintf(w, "✔ %s OK: %s, cached for %v\n", noun, dirPlural(len(r.Keys), "key"), r.TTL)
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
