package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer/signertest"
)

var (
	helpFlagLine   = regexp.MustCompile(`^  (--?[A-Za-z][A-Za-z0-9-]*)`)
	helpUsageFlag  = regexp.MustCompile(`(?:^|[\s\[(|])(--?[A-Za-z][A-Za-z0-9-]*)`)
	helpTextFlag   = regexp.MustCompile(`(?:^|[\s\[(|,'"])(--[a-z][a-z0-9-]*)`)
	helpFlagPrefix = regexp.MustCompile(`^--?`)
)

// helpSections splits the output of `idcli … --help` into its usage line,
// the flags its FLAGS section lists, and the rest of the text (description,
// long help, the flags' descriptions).
func helpSections(t *testing.T, out string) (usage string, flags []string, text string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	section := ""
	var rest []string
	for i, l := range lines {
		switch {
		case l == "DESCRIPTION" || l == "USAGE" || l == "SUBCOMMANDS" || l == "FLAGS":
			section = l
			continue
		case l == "":
			if section == "USAGE" {
				section = "" // the long help follows the usage line
			}
			continue
		}
		switch section {
		case "USAGE":
			usage += l + " "
		case "FLAGS":
			m := helpFlagLine.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("FLAGS line %d %q does not start with a flag", i, l)
			}
			flags = append(flags, m[1])
			rest = append(rest, strings.TrimPrefix(l, m[0]))
		case "SUBCOMMANDS":
		default:
			rest = append(rest, l)
		}
	}
	return usage, flags, strings.Join(rest, "\n")
}

// TestHelpNamesOnlyRealFlags runs every command's --help through the built
// binary: each flag its usage line names is one of its flags and each of
// its flags is in the usage line; each --flag its text mentions is a flag
// of this command or of the command named just before it on the line
// ("use agent curl -d BODY --components …").
func TestHelpNamesOnlyRealFlags(t *testing.T) {
	root := newRootCmd(&cliEnv{})
	flagsOf := map[string][]string{} // command path → flags as spelled
	var paths []string
	for _, e := range completionEntries(root, "") {
		paths = append(paths, e.Path)
		flagsOf[e.Path] = e.Flags
	}
	// Longest first, so "server start" wins over "server".
	byLength := slices.Clone(paths)
	slices.SortFunc(byLength, func(a, b string) int { return len(b) - len(a) })

	for _, path := range paths {
		t.Run("idcli "+path, func(t *testing.T) {
			t.Parallel()
			args := append(strings.Fields(path), "--help")
			r := runBinary(t, t.TempDir(), nil, args...)
			if r.code != 0 {
				t.Fatalf("--help: %v", r)
			}
			usage, listed, text := helpSections(t, r.stdout)
			own := flagsOf[path]
			for _, f := range listed {
				if !slices.Contains(own, f) {
					t.Errorf("FLAGS lists %s, which the command does not define", f)
				}
			}
			for _, f := range own {
				if f != "--help" && !slices.Contains(listed, f) {
					t.Errorf("FLAGS does not list %s", f)
				}
			}
			var inUsage []string
			for _, m := range helpUsageFlag.FindAllStringSubmatch(usage, -1) {
				inUsage = append(inUsage, m[1])
				if !slices.Contains(own, m[1]) {
					t.Errorf("the usage line names %s, which is not a flag of idcli %s:\n%s", m[1], path, usage)
				}
			}
			for _, f := range listed {
				if !slices.Contains(inUsage, f) {
					t.Errorf("the usage line does not name %s:\n%s", f, usage)
				}
			}
			for _, line := range strings.Split(text, "\n") {
				for _, loc := range helpTextFlag.FindAllStringSubmatchIndex(line, -1) {
					f := line[loc[2]:loc[3]]
					cmd := path
					best := -1
					for _, p := range byLength {
						if p == "" {
							continue
						}
						// "idcli agent …", or a two-word path alone ("agent curl …"):
						// a lone word such as "agent" is too common to be a reference.
						i := strings.LastIndex(line[:loc[2]], "idcli "+p+" ")
						if j := strings.LastIndex(line[:loc[2]], p+" "); i < 0 && strings.Contains(p, " ") {
							i = j
						}
						if i > best {
							best, cmd = i, p
						}
					}
					if !slices.Contains(flagsOf[cmd], f) && !slices.Contains(flagsOf[cmd], "-"+helpFlagPrefix.ReplaceAllString(f, "")) {
						t.Errorf("the help mentions %s, which is not a flag of %s:\n%s", f, strings.TrimSpace("idcli "+cmd), line)
					}
				}
			}
		})
	}
}

// TestBinaryHeadersContentDigest: agent headers signs no body, so its help
// does not offer content-digest, and asking for it is refused with the
// command that can sign it.
func TestBinaryHeadersContentDigest(t *testing.T) {
	r := runBinary(t, t.TempDir(), nil, "agent", "headers", "--help")
	if r.code != 0 || strings.Contains(r.stdout, "content-digest also sends") || !strings.Contains(r.stdout, "not content-digest") {
		t.Errorf("agent headers --help: %v; want components help that excludes content-digest", r)
	}
	dir := credsDir(t, testUID, signertest.Key(43), "http://localhost:3000")
	r = runBinary(t, dir, nil, "agent", "headers", "POST", "http://localhost:3000/x", "--components", "@authority,content-digest")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "use agent curl -d BODY") {
		t.Errorf("agent headers --components content-digest: %v; want a refusal pointing to agent curl -d", r)
	}
}
