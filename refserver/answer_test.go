package refserver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentid/agentid/signer"
)

// TestKeyResponseJSON: the hand-written encoder of /whoami's answer writes
// exactly what json.Marshal writes, for every JWK member and for strings
// json.Marshal escapes.
func TestKeyResponseJSON(t *testing.T) {
	t.Parallel()
	every := signer.JWK{}
	v := reflect.ValueOf(&every).Elem()
	for i := range v.NumField() {
		if v.Field(i).Kind() != reflect.String {
			t.Fatalf("signer.JWK.%s is a %s: appendJWK writes strings only", v.Type().Field(i).Name, v.Field(i).Kind())
		}
		v.Field(i).SetString("v-" + v.Type().Field(i).Name)
	}
	yes, no := true, false
	ed := signer.JWK{Kty: "OKP", Crv: "Ed25519", X: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", Kid: "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"}
	tests := []struct {
		name string
		resp keyResponse
	}{
		{"ed25519", keyResponse{UID: "agent-0123456789abcdef01234567", Kid: ed.Kid, PublicJWK: ed, WellKnownURL: "http://agent-0123456789abcdef01234567.localhost:3000/.well-known/http-message-signatures-directory"}},
		{"new", keyResponse{UID: "u", Kid: "k", PublicJWK: ed, IsNew: &yes}},
		{"whoami", keyResponse{UID: "u", Kid: "k", PublicJWK: ed, WellKnownURL: "http://u.h/.well-known/x", SignatureAgent: "http://u.h"}},
		{"not new", keyResponse{UID: "u", Kid: "k", PublicJWK: ed, IsNew: &no}},
		{"every member", keyResponse{PublicJWK: every}},
		{"empty", keyResponse{}},
		{"escaped", keyResponse{UID: `a"b\c`, Kid: "<&>", PublicJWK: signer.JWK{Kty: "\x00\n\u2028é", Kid: "\xff"}, WellKnownURL: "x\x7fy"}},
	}
	for _, tt := range tests {
		want, err := json.Marshal(tt.resp)
		if err != nil {
			t.Fatal(err)
		}
		if got := tt.resp.appendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, want)
		}
	}
}

// TestWhoamiJSON: /whoami's answer, appended without building its URLs,
// is json.Marshal of its keyResponse, escaped strings included.
func TestWhoamiJSON(t *testing.T) {
	t.Parallel()
	ed := signer.JWK{Kty: "OKP", Crv: "Ed25519", X: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", Kid: "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U", D: "secret"}
	for _, tt := range []struct {
		svc signer.ServiceURL
		uid string
		jwk signer.JWK
	}{
		{signer.ServiceURL{Scheme: "http", Host: "localhost:3000"}, "agent-0123456789abcdef01234567", ed},
		{signer.ServiceURL{Scheme: "https", Host: "agentid.example"}, "u", signer.JWK{Kty: "\x00<", Kid: "\xff"}},
		{signer.ServiceURL{Scheme: "https", Host: "a&b"}, `a"b`, ed},
	} {
		resp := keyResponse{UID: tt.uid, Kid: tt.jwk.Kid, PublicJWK: tt.jwk.Public(),
			WellKnownURL: tt.svc.DirectoryURL(tt.uid), SignatureAgent: tt.svc.AgentOrigin(tt.uid)}
		want, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendWhoami(nil, tt.svc, tt.uid, tt.jwk); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", tt.uid, got, want)
		}
	}
}
