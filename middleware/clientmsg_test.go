package middleware

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestClientMessage(t *testing.T) { // not parallel: AllocsPerRun
	for _, tt := range []struct{ in, want string }{
		{"signer: invalid signature input: signer: field too large: 9 bytes, more than 8",
			"invalid signature input: field too large: 9 bytes, more than 8"},
		{"directory_signatures[0]: signature_input: invalid signature input: signer: too many covered components: 9, more than 8",
			"directory_signatures[0]: signature_input: invalid signature input: too many covered components: 9, more than 8"},
		{"agent: server answered 403 forbidden: keyfetch: refserver: closed", "server answered 403 forbidden: closed"},
		{"signer: signer: x", "x"},
		// Not prefixes: a word inside a segment, the last segment, a
		// label or field the client wrote, anything but ": " after it.
		{"invalid signature agent: scheme \"ftp\" is not http or https", "invalid signature agent: scheme \"ftp\" is not http or https"},
		{"sig1: too many covered components", "sig1: too many covered components"},
		{"the key of signer", "the key of signer"},
		{"x: signer", "x: signer"},
		{"signer:x", "signer:x"},
		{"Signer: x", "Signer: x"},
		{"", ""},
	} {
		if got := ClientMessage(errors.New(tt.in)); got != tt.want {
			t.Errorf("ClientMessage(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := ClientMessage(nil); got != "" {
		t.Errorf("ClientMessage(nil) = %q, want \"\"", got)
	}
	wrapped := fmt.Errorf("refserver: stored: %w", errors.New("signer: invalid jwk: not a JSON object"))
	if got, want := ClientMessage(wrapped), "stored: invalid jwk: not a JSON object"; got != want {
		t.Errorf("ClientMessage(wrapped) = %q, want %q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { stripPrefixes("invalid signature input: sig1: no Signature") }); n != 0 {
		t.Errorf("a message without a prefix costs %v allocations, want 0", n)
	}
}

// TestPackagePrefixes: every package of the module (but its tests'
// helpers, named …test) has its name among the prefixes ClientMessage
// removes, so a package added later cannot leak its prefix to clients.
// The command's own packages (cmd/…) are not libraries: their errors
// reach the command line only, prefixed by the command's name ("bench: "),
// which idcli prints.
func TestPackagePrefixes(t *testing.T) {
	t.Parallel()
	clause := regexp.MustCompile(`(?m)^package ([a-z0-9_]+)$`)
	seen := map[string]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != ".." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules" || path == filepath.Join("..", "cmd")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if m := clause.FindSubmatch(b); m != nil {
			seen[string(m[1])] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 10 {
		t.Fatalf("found %d packages from the module's root, want its packages", len(seen))
	}
	for name, path := range seen {
		if name == "main" || strings.HasSuffix(name, "test") {
			continue
		}
		if !packagePrefixes[name] {
			t.Errorf("package %s (%s) is not in packagePrefixes: ClientMessage would leave %q in client messages", name, path, name+": ")
		}
	}
}

// BenchmarkClientMessage measures ClientMessage on a refusal's error with
// prefixes and on one without, against the strings.ReplaceAll of "signer: "
// the verifier used before (the baseline).
func BenchmarkClientMessage(b *testing.B) {
	for _, tt := range []struct{ name, msg string }{
		{"prefixed", "signer: invalid signature input: signer: field too large: Signature-Input is 9000 bytes, more than 8192"},
		{"plain", "invalid signature input: sig1: invalid component \"Content-Digest\": names must be lowercase and non-empty"},
	} {
		err := errors.New(tt.msg)
		b.Run(tt.name+"/ClientMessage", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = ClientMessage(err)
			}
		})
		b.Run(tt.name+"/baseline-ReplaceAll", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = strings.ReplaceAll(err.Error(), "signer: ", "")
			}
		})
	}
}
