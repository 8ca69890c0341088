package signer

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseChallengeHostile reads challenges a hostile server could send:
// each either yields exactly the components it names, or is refused
// whole (no retry), and none panics.
func TestParseChallengeHostile(t *testing.T) {
	t.Parallel()
	many := func(n int) string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = `"x-h` + strings.Repeat("a", i%7) + string(rune('a'+i%26)) + `"`
		}
		return "(" + strings.Join(ids, " ") + ")"
	}
	tests := []struct {
		name      string
		accept    []string
		sigErr    []string
		want      []string // component IDs; nil with ok
		wantErr   bool
		wantFound bool
		wantCode  string
		wantLabel string
		wantNonce string
	}{
		{name: "our label", accept: []string{`sig1=("@authority" "@path" "content-digest");keyid;created;tag="web-bot-auth"`},
			want: []string{`"@authority"`, `"@path"`, `"content-digest"`}, wantFound: true, wantLabel: "sig1"},
		{name: "by tag under another label", accept: []string{`other=("@method");tag="app", wba=("@path");tag="web-bot-auth"`},
			want: []string{`"@path"`}, wantFound: true, wantLabel: "wba"},
		{name: "label wins over tag", accept: []string{`wba=("@path");tag="web-bot-auth", sig1=("@method")`},
			want: []string{`"@method"`}, wantFound: true, wantLabel: "sig1"},
		{name: "no member for us", accept: []string{`other=("@method");tag="app"`}},
		{name: "keyed component", accept: []string{`sig1=("signature-agent";key="sig1")`},
			want: []string{`"signature-agent";key="sig1"`}, wantFound: true, wantLabel: "sig1"},
		{name: "split over lines", accept: []string{`x=("@method")`, `sig1=("@path")`},
			want: []string{`"@path"`}, wantFound: true, wantLabel: "sig1"},
		{name: "server nonce", accept: []string{`sig1=("@authority");nonce="abc"`},
			want: []string{`"@authority"`}, wantFound: true, wantLabel: "sig1", wantNonce: "abc"},
		{name: "keyid of another key is ignored", accept: []string{`sig1=("@path");keyid="someone-else"`},
			want: []string{`"@path"`}, wantFound: true, wantLabel: "sig1"},
		{name: "unknown parameter is ignored", accept: []string{`sig1=("@path");future=1`},
			want: []string{`"@path"`}, wantFound: true, wantLabel: "sig1"},
		{name: "invalid_input required_input", sigErr: []string{`error=invalid_input, required_input=("@method" "@path" "content-digest")`},
			want: []string{`"@method"`, `"@path"`, `"content-digest"`}, wantCode: "invalid_input"},
		{name: "required_input with parameters", sigErr: []string{`error=invalid_input, required_input=("\"signature-agent\";key=\"sig1\"")`},
			want: []string{`"signature-agent";key="sig1"`}, wantCode: "invalid_input"},
		{name: "required_input ignored for another code", sigErr: []string{`error=invalid_signature, required_input=("@path")`},
			wantCode: "invalid_signature"},
		{name: "clock_skew", sigErr: []string{`error=clock_skew`}, wantCode: "clock_skew"},
		{name: "unknown members ignored", sigErr: []string{`error=invalid_input, hint="x", n=5, required_input=("@path")`},
			want: []string{`"@path"`}, wantCode: "invalid_input"},
		{name: "both fields", accept: []string{`sig1=("@path")`}, sigErr: []string{`error=invalid_input, required_input=("@method")`},
			want: []string{`"@method"`, `"@path"`}, wantFound: true, wantLabel: "sig1", wantCode: "invalid_input"},

		// Refused whole.
		{name: "not a dictionary", accept: []string{`sig1=(`}, wantErr: true},
		{name: "garbage", accept: []string{"\x00\xff;;=="}, wantErr: true},
		{name: "member is an item", accept: []string{`sig1="@path"`}, wantErr: true},
		{name: "component is a token", accept: []string{`sig1=(@path)`}, wantErr: true},
		{name: "component is an integer", accept: []string{`sig1=(1)`}, wantErr: true},
		{name: "unknown derived component", accept: []string{`sig1=("@everything")`}, wantErr: true},
		{name: "response-only component", accept: []string{`sig1=("@status")`}, wantErr: true},
		{name: "req parameter", accept: []string{`sig1=("@method";req)`}, wantErr: true},
		{name: "uppercase name", accept: []string{`sig1=("Content-Digest")`}, wantErr: true},
		{name: "trailer parameter", accept: []string{`sig1=("x";tr)`}, wantErr: true},
		{name: "another tag", accept: []string{`sig1=("@path");tag="app-123"`}, wantErr: true},
		{name: "tag not a string", accept: []string{`sig1=("@path");tag=web-bot-auth`}, wantErr: true},
		{name: "another algorithm", accept: []string{`sig1=("@path");alg="rsa-pss-sha512"`}, wantErr: true},
		{name: "empty nonce", accept: []string{`sig1=("@path");nonce=""`}, wantErr: true},
		{name: "long nonce", accept: []string{`sig1=("@path");nonce="` + strings.Repeat("n", maxChallengeNonce+1) + `"`}, wantErr: true},
		{name: "nonce false", accept: []string{`sig1=("@path");nonce=?0`}, wantErr: true},
		{name: "too many components", accept: []string{`sig1=` + many(maxChallengeComponents+1)}, wantErr: true},
		{name: "too many together", accept: []string{`sig1=` + many(20)}, sigErr: []string{`error=invalid_input, required_input=` + many(20)}, wantErr: true},
		{name: "too many members", accept: []string{strings.Repeat(`a=("@path"), `, maxChallengeMembers) + `sig1=("@path")`}, wantErr: true},
		{name: "too many lines", accept: slices.Repeat([]string{`a=("@path")`}, maxChallengeMembers+1), wantErr: true},
		{name: "too large", accept: []string{`sig1=("@path");x="` + strings.Repeat("a", maxChallengeBytes) + `"`}, wantErr: true},
		{name: "Signature-Error without error", sigErr: []string{`required_input=("@path")`}, wantErr: true},
		{name: "error is a string", sigErr: []string{`error="invalid_input"`}, wantErr: true},
		{name: "error is an inner list", sigErr: []string{`error=(invalid_input)`}, wantErr: true},
		{name: "required_input is an item", sigErr: []string{`error=invalid_input, required_input="@path"`}, wantErr: true},
		{name: "required_input holds tokens", sigErr: []string{`error=invalid_input, required_input=(a b)`}, wantErr: true},
		{name: "required_input bad component", sigErr: []string{`error=invalid_input, required_input=("@nope")`}, wantErr: true},
		{name: "required_input bad serialized", sigErr: []string{`error=invalid_input, required_input=("\"x")`}, wantErr: true},
		{name: "Signature-Error garbage", sigErr: []string{`error=invalid_input,,`}, wantErr: true},
		{name: "malformed Signature-Error spoils a good Accept-Signature", accept: []string{`sig1=("@path")`}, sigErr: []string{`error=`}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, err := parseChallenge(tt.accept, tt.sigErr, DefaultLabel, DefaultTag, AlgEd25519)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parsed %+v, want an error", ch)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range ch.components {
				got = append(got, c.ID())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("components %q, want %q", got, tt.want)
			}
			if ch.found != tt.wantFound || ch.label != tt.wantLabel || ch.errCode != tt.wantCode || ch.nonceValue != tt.wantNonce {
				t.Errorf("found %v label %q code %q nonce %q, want %v %q %q %q", ch.found, ch.label, ch.errCode, ch.nonceValue,
					tt.wantFound, tt.wantLabel, tt.wantCode, tt.wantNonce)
			}
		})
	}
}

// FuzzParseChallenge: no input panics, and whatever is accepted stays
// within the bounds.
func FuzzParseChallenge(f *testing.F) {
	f.Add(`sig1=("@authority" "@path");tag="web-bot-auth"`, `error=invalid_input, required_input=("@method")`)
	f.Add(`sig1=(`, `error=clock_skew`)
	f.Fuzz(func(t *testing.T, accept, sigErr string) {
		ch, err := parseChallenge([]string{accept}, []string{sigErr}, DefaultLabel, DefaultTag, AlgEd25519)
		if err == nil && len(ch.components) > maxChallengeComponents {
			t.Fatalf("%d components accepted", len(ch.components))
		}
	})
}

// TestSkewWait reads the wait from the Date a hostile server sends.
func TestSkewWait(t *testing.T) {
	t.Parallel()
	created := time.Unix(1_800_000_000, 0)
	date := func(d time.Duration) string { return created.Add(d).UTC().Format(http.TimeFormat) }
	tests := []struct {
		name  string
		dates []string
		want  time.Duration
		ok    bool
	}{
		{"30 s behind", []string{date(-30 * time.Second)}, 30 * time.Second, true},
		{"60 s behind", []string{date(-60 * time.Second)}, 60 * time.Second, true},
		{"61 s behind", []string{date(-61 * time.Second)}, 0, false},
		{"a year behind", []string{date(-365 * 24 * time.Hour)}, 0, false},
		{"equal", []string{date(0)}, 0, false},
		{"ahead", []string{date(5 * time.Second)}, 0, false},
		{"missing", nil, 0, false},
		{"two", []string{date(-5 * time.Second), date(-50 * time.Second)}, 0, false},
		{"unparseable", []string{"yesterday"}, 0, false},
		{"empty", []string{""}, 0, false},
		{"RFC 850 form", []string{created.Add(-10 * time.Second).UTC().Format(time.RFC850)}, 10 * time.Second, true},
		{"huge year", []string{"Mon, 02 Jan 99999 15:04:05 GMT"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, d := range tt.dates {
				h.Add("Date", d)
			}
			got, ok := skewWait(h, created.Add(400*time.Millisecond))
			if got != tt.want || ok != tt.ok {
				t.Errorf("skewWait = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestMergeComponentsOnlyAdds: a challenge never removes what the
// signer's own options cover, and never repeats one.
func TestMergeComponentsOnlyAdds(t *testing.T) {
	t.Parallel()
	parse := func(ids ...string) []Component {
		var cs []Component
		for _, id := range ids {
			c, err := ParseComponent(id)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		return cs
	}
	got := mergeComponents([]string{"@method", "Content-Type"}, parse(`"@method"`, `"content-type"`, `"@path"`, `"signature-agent";key="sig1"`))
	want := []string{"@method", "Content-Type", "@path", `"signature-agent";key="sig1"`}
	if !slices.Equal(got, want) {
		t.Errorf("merge = %q, want %q", got, want)
	}
	if got := mergeComponents(nil, nil); !slices.Equal(got, []string{"@authority"}) {
		t.Errorf("merge of nothing = %q, want the default profile's", got)
	}
	if got := mergeComponents(nil, parse(`"@query-param";name="a"`)); !slices.Equal(got, []string{"@authority", `"@query-param";name="a"`}) {
		t.Errorf("merge = %q", got)
	}
}
