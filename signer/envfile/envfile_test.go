package envfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const vestauthEnv = `# agent identity (vestauth)
AGENT_UID="agent-0123456789abcdef01234567"
AGENT_PUBLIC_JWK="{"crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kty":"OKP","kid":"kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"}"

export PLAIN=hello # trailing comment
SINGLE='{"a":"b c"}'
ESCAPED="{\"a\":1}"
NEWLINE="line1\nline2"
EMPTY=
SPACED = value with spaces
not a variable line
`

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// keys returns the variable names of f in file order, without duplicates.
func keys(f *File) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range f.lines {
		if l.key != "" && !seen[l.key] {
			seen[l.key] = true
			out = append(out, l.key)
		}
	}
	return out
}

func TestRead(t *testing.T) {
	t.Parallel()
	f, err := Read(writeTemp(t, vestauthEnv))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key, want string
		ok        bool
	}{
		{"AGENT_UID", "agent-0123456789abcdef01234567", true},
		{"AGENT_PUBLIC_JWK", `{"crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kty":"OKP","kid":"kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"}`, true},
		{"PLAIN", "hello", true},
		{"SINGLE", `{"a":"b c"}`, true},
		{"ESCAPED", `{"a":1}`, true},
		{"NEWLINE", "line1\nline2", true},
		{"EMPTY", "", true},
		{"SPACED", "value with spaces", true},
		{"MISSING", "", false},
		{"not", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			got, ok := f.Get(tt.key)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Get(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.ok)
			}
		})
	}
	if got, want := strings.Join(keys(f), ","), "AGENT_UID,AGENT_PUBLIC_JWK,PLAIN,SINGLE,ESCAPED,NEWLINE,EMPTY,SPACED"; got != want {
		t.Errorf("keys = %s, want %s", got, want)
	}
}

func TestReadMissing(t *testing.T) {
	t.Parallel()
	f, err := Read(filepath.Join(t.TempDir(), "nope", ".env"))
	if err != nil {
		t.Fatalf("Read(missing) error = %v, want nil", err)
	}
	if got := len(keys(f)); got != 0 {
		t.Errorf("len(keys) = %d, want 0", got)
	}
}

func TestReadLastWins(t *testing.T) {
	t.Parallel()
	f, err := Read(writeTemp(t, "A=1\r\nA=2\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Get("A"); got != "2" {
		t.Errorf("Get(A) = %q, want %q", got, "2")
	}
}

func TestSetKeepsOtherLines(t *testing.T) {
	t.Parallel()
	path := writeTemp(t, vestauthEnv)
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	newJWK := `{"kty":"OKP","crv":"Ed25519","x":"abc","kid":"def"}`
	f.Set("AGENT_PUBLIC_JWK", newJWK)
	f.Set("AGENT_HOSTNAME", "http://localhost:3000")
	if err := f.Write(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	want := strings.Replace(vestauthEnv,
		`AGENT_PUBLIC_JWK="{"crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kty":"OKP","kid":"kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"}"`,
		`AGENT_PUBLIC_JWK='`+newJWK+`'`, 1) + "AGENT_HOSTNAME=http://localhost:3000\n"
	if got != want {
		t.Errorf("file after Set =\n%s\nwant\n%s", got, want)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("mode = %o, want 600", got)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after Write, want 1 (no temp files left)", len(entries))
	}
}

func TestSetRoundTrip(t *testing.T) {
	t.Parallel()
	values := []string{
		"", "plain", "http://localhost:3000", "postgres://u:p@h:5432/db?sslmode=disable",
		"agent-0123456789abcdef01234567", "with spaces", `{"kty":"OKP","x":"a b"}`, `[1,2]`,
		`it's "both"`, "multi\nline", `back\slash`, `{'a'}`, `["it's"]`, "tab\there", "#hash", "a # b",
		"$HOME", "  padded  ",
	}
	dir := t.TempDir()
	for i, v := range values {
		path := filepath.Join(dir, ".env"+string(rune('a'+i)))
		f, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		f.Set("K", v)
		if err := f.Write(); err != nil {
			t.Fatal(err)
		}
		g, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := g.Get("K"); got != v || !ok {
			t.Errorf("round trip of %q = %q, %v (line %q)", v, got, ok, strings.TrimSpace(string(f.Bytes())))
		}
	}
}

func TestFormatEnvValue(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"agent-abc", "agent-abc"},
		{"http://localhost:3000", "http://localhost:3000"},
		{`{"a":1}`, `'{"a":1}'`},
		{"two words", `"two words"`},
		{"it's", `"it's"`},
		{"", ""},
	}
	for _, tt := range tests {
		if got := formatEnvValue(tt.in); got != tt.want {
			t.Errorf("formatEnvValue(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestSetQuoted(t *testing.T) {
	f, err := Read(filepath.Join(t.TempDir(), ".env"))
	if err != nil {
		t.Fatal(err)
	}
	f.SetQuoted("AGENT_UID", "agent-0123456789abcdef01234567")
	f.SetQuoted("ODD", `a"b`)
	got := string(f.Bytes())
	for _, want := range []string{`AGENT_UID="agent-0123456789abcdef01234567"` + "\n", `ODD='a"b'` + "\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("file = %q, want a line %q", got, want)
		}
	}
	if v, _ := f.Get("AGENT_UID"); v != "agent-0123456789abcdef01234567" {
		t.Errorf("AGENT_UID = %q", v)
	}
}
