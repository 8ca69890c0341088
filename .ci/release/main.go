// Command release builds idcli for every supported platform from a clean
// checkout and writes reproducible release artifacts:
//
//	go run ./.ci/release -out dist
//
// For each target it writes idcli_<version>_<os>_<arch>.tar.gz (.zip for
// Windows) holding the binary, README.md, LICENSE and docs/ (what the README
// links to, so that it reads from the archive), and an SPDX 2.3 SBOM
// of the Go modules linked into that binary (idcli_<version>_<os>_<arch>.spdx.json);
// SHA256SUMS lists them all. Everything derives from the commit: the
// version is signer.Version, the stamped build time and every timestamp in
// the archives is the commit's time, paths are trimmed, so two builds of
// one commit — other clones, other paths, other days — are byte-identical
// as long as the Go toolchain is the same (go.mod's toolchain line).
//
// With -binary OS/ARCH -o PATH it builds just that binary, the same way
// (the Dockerfile uses this).
package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentid/agentid/signer"
)

// target is one platform of the release.
type target struct {
	OS, Arch string
	// Cgo builds with cgo, which the PKCS#11 signer needs. Only the
	// native linux/amd64 build carries it: cross-compiling C for the
	// other platforms needs toolchains a release machine does not have.
	Cgo bool
}

var targets = []target{
	{"linux", "amd64", true},
	{"linux", "arm64", false},
	{"darwin", "amd64", false},
	{"darwin", "arm64", false},
	{"windows", "amd64", false},
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	out := fs.String("out", "dist", "directory for the archives, SBOMs and SHA256SUMS (must not exist, or be empty)")
	only := fs.String("binary", "", "build only this OS/ARCH binary, to -o")
	binOut := fs.String("o", "", "with -binary: where to write the binary")
	commit := fs.String("commit", "", "commit to stamp (default: git rev-parse HEAD; needed where there is no .git)")
	date := fs.String("date", "", "commit time to stamp, RFC 3339 or Unix seconds (default: the commit's time from git)")
	noCgo := fs.Bool("no-cgo", false, "build every target without cgo (no PKCS#11)")
	allowDirty := fs.Bool("allow-dirty", false, "build from a work tree with uncommitted changes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	src, err := stampOf(*commit, *date, *allowDirty)
	if err != nil && *only != "" && *commit == "" {
		// A single binary from a source tree without .git (a container
		// build context): it reports its commit as unknown.
		fmt.Fprintf(os.Stderr, "release: %v; the binary will report commit unknown\n", err)
		src, err = stamp{}, nil
	}
	if err != nil {
		return err
	}
	if *only != "" {
		t, err := findTarget(*only)
		if err != nil {
			return err
		}
		if *binOut == "" {
			return errors.New("-binary needs -o PATH")
		}
		if *noCgo {
			t.Cgo = false
		}
		return build(t, src, *binOut)
	}
	return release(*out, src, *noCgo)
}

func findTarget(s string) (target, error) {
	for _, t := range targets {
		if t.OS+"/"+t.Arch == s {
			return t, nil
		}
	}
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.OS + "/" + t.Arch
	}
	return target{}, fmt.Errorf("unknown target %q (targets: %s)", s, strings.Join(names, ", "))
}

// stamp is what a build records of its source.
type stamp struct {
	Commit string
	Time   time.Time
}

func stampOf(commit, date string, allowDirty bool) (stamp, error) {
	var s stamp
	if commit == "" {
		c, err := git("rev-parse", "HEAD")
		if err != nil {
			return s, fmt.Errorf("no -commit and no git checkout: %w", err)
		}
		commit = c
		if !allowDirty {
			st, err := git("status", "--porcelain", "--untracked-files=no")
			if err != nil {
				return s, err
			}
			if st != "" {
				return s, errors.New("the work tree has uncommitted changes (commit them, or pass -allow-dirty)")
			}
		}
	}
	if len(commit) != 40 || strings.Trim(commit, "0123456789abcdef") != "" {
		return s, fmt.Errorf("commit %q is not a full lowercase hex hash", commit)
	}
	if date == "" {
		d, err := git("show", "-s", "--format=%ct", commit)
		if err != nil {
			return s, fmt.Errorf("no -date, and git cannot tell the commit's time: %w", err)
		}
		date = d
	}
	if n, err := strconv.ParseInt(date, 10, 64); err == nil {
		s.Time = time.Unix(n, 0).UTC()
	} else if t, err := time.Parse(time.RFC3339, date); err == nil {
		s.Time = t.UTC()
	} else {
		return s, fmt.Errorf("-date %q is neither RFC 3339 nor Unix seconds", date)
	}
	s.Commit = commit
	return s, nil
}

func git(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(ee.Stderr))
		}
		return "", fmt.Errorf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// build compiles ./cmd/idcli for t into path. Only what the build reads
// from the environment and could vary between machines is pinned here:
// GOFLAGS, the architecture levels, the VCS stamping (the commit is
// stamped explicitly instead) and the paths (-trimpath).
func build(t target, s stamp, path string) error {
	cgo := "0"
	if t.Cgo {
		cgo = "1"
	}
	ldflags := "-s -w -buildid="
	if s.Commit != "" {
		ldflags += fmt.Sprintf(" -X main.buildCommit=%s -X main.buildTime=%s", s.Commit, s.Time.Format(time.RFC3339))
	}
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", path, "./cmd/idcli")
	cmd.Env = append(os.Environ(),
		"GOOS="+t.OS, "GOARCH="+t.Arch, "CGO_ENABLED="+cgo,
		"GOFLAGS=", "GOAMD64=v1", "GOARM64=v8.0", "GOEXPERIMENT=", "GOTOOLCHAIN=local",
		"CGO_CFLAGS=-O2", "CGO_LDFLAGS=-O2",
	)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s/%s: %w", t.OS, t.Arch, err)
	}
	return nil
}

func release(out string, s stamp, noCgo bool) error {
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty", out)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	stage, err := os.MkdirTemp("", "agentid-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)

	readme, err := os.ReadFile("README.md")
	if err != nil {
		return err
	}
	license, err := os.ReadFile("LICENSE")
	if err != nil {
		return err
	}
	docs, err := docFiles("docs")
	if err != nil {
		return err
	}
	var sums []string
	for _, t := range targets {
		if noCgo {
			t.Cgo = false
		}
		name := fmt.Sprintf("idcli_%s_%s_%s", signer.Version, t.OS, t.Arch)
		exe := "idcli"
		if t.OS == "windows" {
			exe += ".exe"
		}
		bin := filepath.Join(stage, name, exe)
		fmt.Fprintf(os.Stderr, "building %s/%s (cgo %v)\n", t.OS, t.Arch, t.Cgo)
		if err := build(t, s, bin); err != nil {
			return err
		}
		binary, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		files := []file{
			{name + "/" + exe, binary, 0o755},
			{name + "/LICENSE", license, 0o644},
			{name + "/README.md", readme, 0o644},
		}
		for _, d := range docs {
			files = append(files, file{name + "/" + d.Name, d.Data, d.Mode})
		}
		var archive []byte
		archiveName := name + ".tar.gz"
		if t.OS == "windows" {
			archiveName = name + ".zip"
			archive, err = zipArchive(files, s.Time)
		} else {
			archive, err = tarGz(files, s.Time)
		}
		if err != nil {
			return err
		}
		sbom, err := spdx(bin, name, s)
		if err != nil {
			return err
		}
		for _, a := range []struct {
			name string
			data []byte
		}{{archiveName, archive}, {name + ".spdx.json", sbom}} {
			if err := os.WriteFile(filepath.Join(out, a.name), a.data, 0o644); err != nil {
				return err
			}
			sum := sha256.Sum256(a.data)
			sums = append(sums, hex.EncodeToString(sum[:])+"  "+a.name)
		}
	}
	sort.Slice(sums, func(i, j int) bool { return sums[i][66:] < sums[j][66:] })
	if err := os.WriteFile(filepath.Join(out, "SHA256SUMS"), []byte(strings.Join(sums, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "release %s (commit %s, %s) in %s\n", signer.Version, s.Commit, s.Time.Format(time.RFC3339), out)
	return nil
}

// docFiles returns the files under dir, in lexical order, named by their
// slash paths from the work tree's root: the documentation the README links
// to. Tests (_test.go) are left out; a file keeps its executable bit (the
// recipes), everything else is 0644.
func docFiles(dir string) ([]file, error) {
	var out []file
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.go") {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file", path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		out = append(out, file{filepath.ToSlash(path), data, mode})
		return nil
	})
	return out, err
}

// file is one member of an archive.
type file struct {
	Name string
	Data []byte
	Mode int64
}

// tarGz writes a gzip-compressed tar archive whose bytes depend only on
// the files and mtime: fixed order, owner 0:0 without names, no gzip name
// or time.
func tarGz(files []file, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	dir := strings.SplitN(files[0].Name, "/", 2)[0] + "/"
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	for _, f := range files {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: f.Name, Mode: f.Mode, Size: int64(len(f.Data)), ModTime: mtime, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// zipArchive writes a zip archive with fixed order and times.
func zipArchive(files []file, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.Name, Method: zip.Deflate, Modified: mtime}
		h.SetMode(os.FileMode(f.Mode))
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// spdx returns an SPDX 2.3 JSON document listing the Go modules the
// binary at path was linked from, as its build information records them.
func spdx(path, name string, s stamp) ([]byte, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the build information of %s: %w", path, err)
	}
	type ref struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	type pkg struct {
		ID               string `json:"SPDXID"`
		Name             string `json:"name"`
		Version          string `json:"versionInfo"`
		DownloadLocation string `json:"downloadLocation"`
		FilesAnalyzed    bool   `json:"filesAnalyzed"`
		ExternalRefs     []ref  `json:"externalRefs"`
		Comment          string `json:"comment,omitempty"`
	}
	type rel struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
	doc := struct {
		Version       string `json:"spdxVersion"`
		DataLicense   string `json:"dataLicense"`
		ID            string `json:"SPDXID"`
		Name          string `json:"name"`
		Namespace     string `json:"documentNamespace"`
		CreationInfo  any    `json:"creationInfo"`
		Packages      []pkg  `json:"packages"`
		Relationships []rel  `json:"relationships"`
	}{
		Version:     "SPDX-2.3",
		DataLicense: "CC0-1.0",
		ID:          "SPDXRef-DOCUMENT",
		Name:        name,
		Namespace:   "https://github.com/agentid/agentid/releases/spdx/" + name + "-" + s.Commit,
		CreationInfo: map[string]any{
			"created":  s.Time.Format(time.RFC3339),
			"creators": []string{"Tool: agentid .ci/release", "Organization: agentid"},
			"comment":  "Go modules linked into idcli, from the binary's build information (" + info.GoVersion + ").",
		},
	}
	main := pkg{
		ID: "SPDXRef-Package-idcli", Name: info.Main.Path, Version: signer.Version,
		DownloadLocation: "https://github.com/agentid/agentid",
		ExternalRefs:     []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + info.Main.Path + "@v" + signer.Version}},
		Comment:          "commit " + s.Commit,
	}
	doc.Packages = append(doc.Packages, main)
	doc.Relationships = append(doc.Relationships, rel{"SPDXRef-DOCUMENT", "DESCRIBES", main.ID})
	toolchain := pkg{
		ID: "SPDXRef-Package-go", Name: "go", Version: strings.TrimPrefix(info.GoVersion, "go"),
		DownloadLocation: "https://go.dev/dl/",
		ExternalRefs:     []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + info.GoVersion}},
	}
	doc.Packages = append(doc.Packages, toolchain)
	doc.Relationships = append(doc.Relationships, rel{main.ID, "DEPENDS_ON", toolchain.ID})
	deps := append([]*debug.Module(nil), info.Deps...)
	sort.Slice(deps, func(i, j int) bool { return deps[i].Path < deps[j].Path })
	for i, d := range deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		p := pkg{
			ID: "SPDXRef-Package-" + strconv.Itoa(i+1), Name: m.Path, Version: m.Version,
			DownloadLocation: "https://proxy.golang.org/" + m.Path + "/@v/" + m.Version + ".zip",
			ExternalRefs:     []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.Path + "@" + m.Version}},
		}
		if m.Sum != "" {
			p.Comment = "go.sum " + m.Sum
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, rel{main.ID, "DEPENDS_ON", p.ID})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
