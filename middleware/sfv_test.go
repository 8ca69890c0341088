package middleware_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentid/agentid/signer"
	"github.com/dunglas/httpsfv"
)

// TestSignatureParamsMatchHTTPSFV checks the signer's hand-written
// serializer of @signature-params (and of component identifiers) against
// httpsfv.Marshal of the same parsed inner list, byte for byte, including
// the values it hands back to httpsfv (decimals, byte sequences).
func TestSignatureParamsMatchHTTPSFV(t *testing.T) {
	tests := []struct {
		name, input string
	}{
		{"default profile", `sig1=("@authority");created=1767225600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=1767225900;nonce="n9p433xm+NJ3ph3upfBIGmsuwHw387YV7Q/F+6BSpGCVjYCqQw6rznNA8PVVLySrAWsv0hQtFioQb6E1YsauiA==";tag="web-bot-auth"`},
		{"five components", `sig1=("@method" "@authority" "@path" "content-digest" "signature-agent";key="sig1");created=1;keyid="k";alg="ed25519";expires=2;nonce="n";tag="web-bot-auth"`},
		{"extra whitespace normalized", `sig1=(  "@authority"   "@method"  );created=1;  keyid="k"`},
		{"escaped string", `sig1=("@authority");created=1;keyid="a\"b\\c";nonce="x y"`},
		{"token parameter", `sig1=("@authority");created=1;keyid="k";x=web-bot-auth`},
		{"token with colon and slash", `sig1=("@authority");created=1;keyid="k";x=*a:b/c`},
		{"boolean parameters", `sig1=("@authority");created=1;keyid="k";flag;off=?0`},
		{"negative and largest integers", `sig1=("@authority");created=999999999999999;keyid="k";x=-5`},
		{"decimal falls back", `sig1=("@authority");created=1;keyid="k";x=1.5`},
		{"byte sequence falls back", `sig1=("@authority");created=1;keyid="k";x=:AAAA:`},
		{"star key", `sig1=("@authority");created=1;keyid="k";*x=1`},
		{"sf and name parameters", `sig1=("content-type";sf "@query-param";name="a b" "@authority");created=1;keyid="k"`},
		{"empty inner list", `sig1=();created=1;keyid="k"`},
		{"uppercase token", `sig1=("@authority");created=1;keyid="k";x=Web-Bot-Auth`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sigs, err := signer.ParseSignatures([]string{tt.input}, []string{"sig1=:AAAA:"})
			if err != nil {
				t.Fatal(err)
			}
			d, err := httpsfv.UnmarshalDictionary([]string{tt.input})
			if err != nil {
				t.Fatal(err)
			}
			m, _ := d.Get("sig1")
			il := m.(httpsfv.InnerList)
			want, err := httpsfv.Marshal(il)
			if err != nil {
				t.Fatal(err)
			}
			got, err := sigs[0].SignatureParams()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("SignatureParams = %s, want %s", got, want)
			}
			for i, c := range sigs[0].Components {
				want, _ := httpsfv.Marshal(il.Items[i])
				if c.ID() != want {
					t.Errorf("component %d ID = %s, want %s", i, c.ID(), want)
				}
			}
			// The base ends with the same serialization.
			if len(sigs[0].Components) == 0 || sigs[0].Components[0].Name == "@authority" {
				r := httptest.NewRequest("GET", "https://example.com/", nil)
				if len(sigs[0].Components) > 1 {
					return
				}
				base, err := sigs[0].Base(r)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasSuffix(string(base), "\n\"@signature-params\": "+want) && string(base) != `"@signature-params": `+want {
					t.Errorf("base = %q, want it to end with %s", base, want)
				}
			}
		})
	}
}

// TestSignatureAgentMemberMatchesHTTPSFV checks the re-serialized
// `"signature-agent";key=…` component value against httpsfv.
func TestSignatureAgentMemberMatchesHTTPSFV(t *testing.T) {
	for _, field := range []string{
		`sig1="https://a.example"`,
		`sig1=a.example`,
		`sig1="https://a.example";p=1, sig2="x\"y"`,
		`sig1=("https://a.example" "b");q`,
		`sig1=1.25`,
	} {
		t.Run(field, func(t *testing.T) {
			r := httptest.NewRequest("GET", "https://example.com/", nil)
			r.Header.Set("Signature-Agent", field)
			sigs, err := signer.ParseSignatures([]string{`sig1=("signature-agent";key="sig1");created=1`}, []string{"sig1=:AAAA:"})
			if err != nil {
				t.Fatal(err)
			}
			base, err := sigs[0].Base(r)
			if err != nil {
				t.Fatal(err)
			}
			d, _ := httpsfv.UnmarshalDictionary([]string{field})
			m, _ := d.Get("sig1")
			want, _ := httpsfv.Marshal(m)
			got := strings.SplitN(strings.TrimPrefix(string(base), `"signature-agent";key="sig1": `), "\n", 2)[0]
			if got != want {
				t.Errorf("component value = %s, want %s", got, want)
			}
		})
	}
}
