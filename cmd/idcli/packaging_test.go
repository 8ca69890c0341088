package main

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/store"
	"github.com/agentid/agentid/signer"
)

// Docker is not needed to run these tests: they check that the Dockerfile
// and compose.yaml at the repository root refer to what exists (the package
// built, the Go version, idcli commands and flags) and keep their promises
// (a static binary, a non-root user).

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkIdcliArgs wants args to be an idcli command line that parses (the
// command exists and knows every flag).
func checkIdcliArgs(t *testing.T, where string, args []string) {
	t.Helper()
	r := runCLI(t.Context(), t.TempDir(), nil, append(append([]string(nil), args...), "-h")...)
	if !errors.Is(r.err, flag.ErrHelp) {
		t.Errorf("%s: idcli %s does not parse: %v\n%s", where, strings.Join(args, " "), r.err, r.stderr)
	}
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	df := readRepoFile(t, "Dockerfile")
	gomod := readRepoFile(t, "go.mod")

	// The image is built as the release binaries are, by .ci/release,
	// without cgo (the final stage has no C library).
	build := regexp.MustCompile(`(?m)^RUN go run (\./\.ci/release) -binary linux/\$\{TARGETARCH\} -no-cgo .* -o /out/idcli$`).FindStringSubmatch(df)
	if build == nil {
		t.Fatal("Dockerfile: idcli is not built by the release build (go run ./.ci/release -binary … -no-cgo … -o /out/idcli)")
	}
	release, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(build[1]), "main.go"))
	if err != nil || !strings.Contains(string(release), `"./cmd/idcli"`) {
		t.Errorf("Dockerfile runs %s, which does not build ./cmd/idcli: %v", build[1], err)
	}

	// The toolchain line names the Go release the module is built with
	// (the go directive, the oldest it supports, when there is none).
	goVersion := regexp.MustCompile(`(?m)^toolchain go(\S+)$`).FindStringSubmatch(gomod)
	if goVersion == nil {
		goVersion = regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(gomod)
	}
	if goVersion == nil || !strings.Contains(df, "FROM golang:"+goVersion[1]+" AS build") {
		t.Errorf("Dockerfile: the build stage is not golang:%v (go.mod's toolchain)", goVersion)
	}

	stages := strings.Split(df, "\nFROM ")
	final := stages[len(stages)-1]
	user := regexp.MustCompile(`(?m)^USER (\S+)$`).FindStringSubmatch(final)
	if user == nil || strings.HasPrefix(user[1], "root") || strings.HasPrefix(user[1], "0") {
		t.Errorf("Dockerfile: the final stage runs as %v, want a non-root USER", user)
	}
	if !strings.Contains(final, "COPY --from=build /out/idcli /usr/local/bin/idcli") ||
		!strings.Contains(final, `ENTRYPOINT ["/usr/local/bin/idcli"]`) {
		t.Error("Dockerfile: the final stage does not copy and run the built idcli")
	}
	cmd := regexp.MustCompile(`(?m)^CMD (\[.*\])$`).FindStringSubmatch(final)
	var args []string
	if cmd == nil || json.Unmarshal([]byte(cmd[1]), &args) != nil {
		t.Fatalf("Dockerfile: no CMD as a JSON array")
	}
	checkIdcliArgs(t, "Dockerfile CMD", args)

	ignore := readRepoFile(t, ".dockerignore")
	for _, want := range []string{".git", "**/.env", "*.db"} {
		if !strings.Contains(ignore, "\n"+want+"\n") {
			t.Errorf(".dockerignore lacks %q", want)
		}
	}
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	c := readRepoFile(t, "compose.yaml")
	commands := regexp.MustCompile(`(?m)^\s+command: (\[.*\])$`).FindAllStringSubmatch(c, -1)
	if len(commands) < 3 {
		t.Fatalf("compose.yaml: %d idcli commands, want db:migrate, server start and proxy", len(commands))
	}
	var joined []string
	for _, m := range commands {
		var args []string
		if err := json.Unmarshal([]byte(m[1]), &args); err != nil {
			t.Fatalf("compose.yaml: command %s: %v", m[1], err)
		}
		checkIdcliArgs(t, "compose.yaml", args)
		joined = append(joined, strings.Join(args, " "))
	}
	for _, want := range []string{"server db:migrate", "server start", "proxy --listen :8080 --upstream http://upstream:80 --trust *.localhost"} {
		found := false
		for _, j := range joined {
			found = found || strings.HasPrefix(j, want)
		}
		if !found {
			t.Errorf("compose.yaml runs %q, want %q among them", joined, want)
		}
	}
	urls := regexp.MustCompile(`DATABASE_URL: (\S+)`).FindAllStringSubmatch(c, -1)
	if len(urls) == 0 {
		t.Error("compose.yaml sets no DATABASE_URL")
	}
	for _, u := range urls {
		if store.DatabaseKind(u[1]) != "postgres" {
			t.Errorf("compose.yaml: DATABASE_URL %s is not PostgreSQL", u[1])
		}
	}
	// The proxy reaches http://<uid>.localhost:3000 only inside the server's
	// network namespace, where its port is published.
	for _, want := range []string{"build: .", "HOSTNAME: http://localhost:3000", "service_completed_successfully",
		`network_mode: "service:agentid"`, `"127.0.0.1:8080:8080"`, "\n  upstream:\n    image: "} {
		if !strings.Contains(c, want) {
			t.Errorf("compose.yaml lacks %q", want)
		}
	}
}

func TestLicense(t *testing.T) {
	t.Parallel()
	l := readRepoFile(t, "LICENSE")
	for _, want := range []string{"Apache License\n                           Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "END OF TERMS AND CONDITIONS", "APPENDIX: How to apply the Apache License"} {
		if !strings.Contains(l, want) {
			t.Errorf("LICENSE lacks %q", want)
		}
	}
}

// TestReadmeReleaseVersion wants README.md's install-from-a-release block
// (run by .ci/release.sh against the files a release build writes) to
// download this version's archive.
func TestReadmeReleaseVersion(t *testing.T) {
	t.Parallel()
	readme := readRepoFile(t, "README.md")
	m := regexp.MustCompile("(?m)^```shell\n(?:#.*\n)*v=(\\S+?);").FindStringSubmatch(readme)
	if m == nil {
		t.Fatal("README.md: no ```shell install block starting v=<version>;")
	}
	if m[1] != signer.Version {
		t.Errorf("README.md installs release %s, want %s (signer.Version)", m[1], signer.Version)
	}
}
