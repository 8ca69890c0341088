package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/pkcs11"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// buildCommit and buildTime are stamped by the release build
// (-ldflags "-X main.buildCommit=… -X main.buildTime=…"); a build that
// leaves them empty reports what the Go toolchain recorded of the
// checkout it was built from (vcs.revision and vcs.time), if anything.
// buildTime is the commit's time, not the clock of the build, so that
// two builds of one commit are byte-identical.
var (
	buildCommit string
	buildTime   string
)

// buildInfo is what `idcli version` reports about this binary.
type buildInfo struct {
	Commit   string // full commit hash, or "unknown"
	Time     string // RFC 3339 UTC time of that commit, or ""
	Modified bool   // built from a work tree with uncommitted changes
}

// readBuildInfo prefers the stamped values and falls back to the VCS
// settings the go command embeds when it builds from a git checkout.
func readBuildInfo() buildInfo {
	bi := buildInfo{Commit: buildCommit, Time: buildTime}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if bi.Commit == "" {
					bi.Commit = s.Value
				}
			case "vcs.time":
				if bi.Time == "" {
					bi.Time = s.Value
				}
			case "vcs.modified":
				bi.Modified = s.Value == "true" && buildCommit == ""
			}
		}
	}
	if bi.Commit == "" {
		bi.Commit = "unknown"
	}
	if t, err := time.Parse(time.RFC3339, bi.Time); err == nil {
		bi.Time = t.UTC().Format(time.RFC3339)
	} else {
		bi.Time = ""
	}
	return bi
}

// newVersionCmd is `idcli version`, the same as `idcli --version`.
func newVersionCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli version", env)
	asJSON := fs.Bool("json", false, "print the version as JSON")
	return &ffcli.Command{
		Name:       "version",
		ShortUsage: "idcli version [--json]",
		ShortHelp:  "print the version, the commit it was built from, and the Go version",
		LongHelp: `With --json: {"name":"idcli","version":"…","commit":"…","built":"…","modified":false,` + "\n" +
			`"go":"go1.…","platform":"linux/amd64","pkcs11":true}. "built" is the time of the` + "\n" +
			`commit (reproducible builds); "pkcs11" says whether this binary can sign with a` + "\n" +
			`PKCS#11 token (it needs a cgo build).`,
		FlagSet: fs,
		Exec: func(_ context.Context, args []string) error {
			if err := noArgs("version", args); err != nil {
				return err
			}
			printVersion(env, *asJSON)
			return nil
		},
	}
}

// versionJSON is the --json output of `idcli version`.
type versionJSON struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Built    string `json:"built,omitempty"`
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	PKCS11   bool   `json:"pkcs11"`
}

func currentVersion() versionJSON {
	bi := readBuildInfo()
	return versionJSON{
		Name:     "idcli",
		Version:  signer.Version,
		Commit:   bi.Commit,
		Built:    bi.Time,
		Modified: bi.Modified,
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
		PKCS11:   pkcs11.Supported,
	}
}

// printVersion prints one line: `idcli 1.0.0 (commit 0123456789ab, built
// 2026-11-27T14:15:00Z, go1.26.8 linux/amd64)`.
func printVersion(env *cliEnv, asJSON bool) {
	v := currentVersion()
	if asJSON {
		_ = writeJSON(env.Stdout, v, false)
		return
	}
	commit := v.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if v.Modified {
		commit += "+modified"
	}
	built := ""
	if v.Built != "" {
		built = ", built " + v.Built
	}
	fmt.Fprintf(env.Stdout, "idcli %s (commit %s%s, %s %s)\n", v.Version, commit, built, v.Go, v.Platform)
}
