package explain_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/explain"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// TestMismatch: for each disagreement explain looks for, a request signed
// one way and received the other way is diagnosed with the component at
// fault; a request signed by another key gets no false diagnosis.
func TestMismatch(t *testing.T) {
	t.Parallel()
	key := signertest.Key(0x31)
	tests := []struct {
		name, signedURL, signedMethod string
		components                    []string
		gotURL, gotMethod             string
		want                          string
	}{
		{"method", "https://api.example/a", "PUT", []string{"@method", "@authority"}, "https://api.example/a", "POST",
			`"@method": PUT, not POST`},
		{"port", "http://localhost/a", "GET", []string{"@authority"}, "http://localhost:3000/a", "GET",
			`"@authority": localhost, not localhost:3000`},
		{"trailing slash", "https://api.example/a/", "GET", []string{"@authority", "@path"}, "https://api.example/a", "GET",
			`"@path": /a/, not /a`},
		{"scheme", "http://api.example/a", "GET", []string{"@scheme", "@authority"}, "https://api.example/a", "GET",
			`"@scheme": http, not https`},
		{"authority", "https://api.example/a", "GET", []string{"@authority"}, "https://other.example/a", "GET",
			"none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			signed, _ := http.NewRequest(tt.signedMethod, tt.signedURL, nil)
			if err := signer.Sign(signed, key, signer.Options{Components: tt.components, Created: time.Unix(1735689600, 0), Nonce: "n"}); err != nil {
				t.Fatal(err)
			}
			got, _ := http.NewRequest(tt.gotMethod, tt.gotURL, nil)
			got.Header = signed.Header.Clone()
			sigs, err := signer.ParseSignatures(got.Header.Values("Signature-Input"), got.Header.Values("Signature"))
			if err != nil {
				t.Fatal(err)
			}
			base, err := sigs[0].Base(got)
			if err != nil {
				t.Fatal(err)
			}
			verifies := key.Public.Verify("", base, sigs[0].Value) == nil
			if verifies {
				t.Fatal("the signature verifies, want a mismatch")
			}
			m := explain.Mismatch(got, &sigs[0], key.Public)
			if tt.want == "none" {
				if m != "" {
					t.Errorf("mismatch = %q, want none found", m)
				}
				return
			}
			if !strings.Contains(m, tt.want) {
				t.Errorf("mismatch = %q, want it to contain %q", m, tt.want)
			}
			// Another key's signature is never "explained" by a variant.
			if m := explain.Mismatch(got, &sigs[0], signertest.Key(0x32).Public); m != "" {
				t.Errorf("mismatch with another key = %q, want none", m)
			}
		})
	}
}
