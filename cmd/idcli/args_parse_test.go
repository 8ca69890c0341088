package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

// TestArgumentsThatBeginWithDash: the arguments of every command are
// read by one parser. An argument may begin with "-" when the command
// takes that many arguments; after "--" every word is an argument, whether
// ffcli (the leading flags) or the parser (flags after the arguments) met
// the "--"; a flag's value may be "--"; a word that names a flag is a
// flag; and a word like a flag beyond the arguments the command takes is
// an unknown flag (the one most like a flag of the command).
func TestArgumentsThatBeginWithDash(t *testing.T) {
	t.Parallel()
	const kid = "-gG9Euglk6WDOpZKAB-w2IGCs-_l9mlg_FUC4maWUoA" // a key id (base64url)
	for _, tt := range []struct {
		name    string
		line    []string // the command line after the command's name
		n       int      // the arguments the command takes (-1: any)
		want    []string
		wantErr string
		json    bool
		db      string
	}{
		{name: "dash after the first", line: []string{"U", kid}, n: 2, want: []string{"U", kid}},
		{name: "two dashes", line: []string{"U", "-" + kid}, n: 2, want: []string{"U", "-" + kid}},
		{name: "dash with =", line: []string{"U", "-K=x"}, n: 2, want: []string{"U", "-K=x"}},
		{name: "terminator first", line: []string{"--", "U", kid}, n: 2, want: []string{"U", kid}},
		{name: "terminator after flags", line: []string{"--json", "--db", "D", "--", "-U", "--json"}, n: 2, want: []string{"-U", "--json"}, json: true, db: "D"},
		{name: "terminator between", line: []string{"U", "--", "--json"}, n: 2, want: []string{"U", "--json"}},
		{name: "flags after", line: []string{"U", kid, "--json", "--db", "D"}, n: 2, want: []string{"U", kid}, json: true, db: "D"},
		{name: "flags between", line: []string{"U", "--db=D", kid, "--json"}, n: 2, want: []string{"U", kid}, json: true, db: "D"},
		{name: "a flag's value --", line: []string{"--db", "--", "U", "K"}, n: 2, want: []string{"U", "K"}, db: "--"},
		{name: "a flag's value -- after", line: []string{"U", "--db", "--", "--json", "K"}, n: 2, want: []string{"U", "K"}, json: true, db: "--"},
		{name: "a flag's name is a flag", line: []string{"U", "-json", "K"}, n: 2, want: []string{"U", "K"}, json: true},
		{name: "unknown flag, all arguments given", line: []string{"U", "K", "-jsn"}, n: 2, wantErr: "-jsn"},
		{name: "unknown flag in place of one", line: []string{"U", "-jsn", "K"}, n: 2, wantErr: "-jsn"},
		{name: "unknown flag before a dash argument", line: []string{"U", "--jsn", kid}, n: 2, wantErr: "-jsn"},
		{name: "unknown flag after a dash argument", line: []string{"U", kid, "--jsn"}, n: 2, wantErr: "-jsn"},
		{name: "unknown flag like no flag, after a dash argument", line: []string{"U", kid, "--zzzzzz"}, n: 2, wantErr: "-zzzzzz"},
		{name: "dash arguments, one too few", line: []string{"-", kid}, n: 3, want: []string{"-", kid}},
		{name: "unknown flag, no arguments taken", line: []string{"-", "--jsn"}, n: 0, wantErr: "-jsn"},
		{name: "unknown flag, any number", line: []string{"U", "--jsn"}, n: -1, wantErr: "-jsn"},
		{name: "help", line: []string{"U", "-h"}, n: 2, wantErr: flag.ErrHelp.Error()},
		{name: "lone dash", line: []string{"U", "-"}, n: 2, want: []string{"U", "-"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := &cliEnv{Stdout: io.Discard, Stderr: io.Discard}
			fs := newFlagSet("idcli test", env)
			asJSON := fs.Bool("json", false, "")
			db := fs.String("db", "", "")
			// What ffcli does: the command line is "idcli test LINE…";
			// it parses the leading flags and runs the command with the rest.
			env.args = append([]string{"test"}, tt.line...)
			if err := fs.Parse(env.args[1:]); err != nil {
				t.Fatal(err)
			}
			got, err := env.parseInterspersed(fs, fs.Args(), tt.n)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("args %q, error %v; want an error naming %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) || *asJSON != tt.json || *db != tt.db {
				t.Errorf("args %q, --json %v, --db %q, error %v; want %q, %v, %q", got, *asJSON, *db, err, tt.want, tt.json, tt.db)
			}
		})
	}
}
