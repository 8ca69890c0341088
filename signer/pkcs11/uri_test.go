package pkcs11

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseURI(t *testing.T) {
	t.Parallel()
	env := map[string]string{EnvPIN: "env-pin", EnvModule: "/env/module.so"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name, in string
		want     URI
		wantErr  string
	}{
		{name: "full", in: "pkcs11:token=bots;object=crawler;id=%01%02?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-value=1234",
			want: URI{Token: "bots", Object: "crawler", ID: []byte{1, 2}, ModulePath: "/usr/lib/softhsm/libsofthsm2.so", PIN: "1234"}},
		{name: "pin and module from the environment", in: "pkcs11:token=my%20token;object=a%3Bb;type=private",
			want: URI{Token: "my token", Object: "a;b", ModulePath: "/env/module.so", PIN: "env-pin"}},
		{name: "not pkcs11", in: "https://x", wantErr: "invalid URI"},
		{name: "no token", in: "pkcs11:object=a?module-path=/m", wantErr: "token="},
		{name: "no object", in: "pkcs11:token=a?module-path=/m", wantErr: "object="},
		{name: "unknown attribute", in: "pkcs11:token=a;object=b;serial=1", wantErr: `"serial" is not supported`},
		{name: "public type", in: "pkcs11:token=a;object=b;type=public", wantErr: "type=public"},
		{name: "twice", in: "pkcs11:token=a;token=b;object=c", wantErr: "given twice"},
		{name: "bad escape", in: "pkcs11:token=%zz;object=c", wantErr: "percent-encoding"},
		{name: "unknown query", in: "pkcs11:token=a;object=b?pin-source=file:/p", wantErr: `"pin-source" is not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseURI(tt.in, getenv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got.ID) != fmt.Sprint(tt.want.ID) || got.Token != tt.want.Token || got.Object != tt.want.Object ||
				got.ModulePath != tt.want.ModulePath || got.PIN != tt.want.PIN {
				t.Errorf("ParseURI = %+v, want %+v", got, tt.want)
			}
		})
	}
	// Without a module anywhere, the error says how to name one.
	if _, err := ParseURI("pkcs11:token=a;object=b", nil); err == nil || !strings.Contains(err.Error(), EnvModule) {
		t.Errorf("error = %v, want one naming %s", err, EnvModule)
	}
}

func TestURIStringHidesPIN(t *testing.T) {
	t.Parallel()
	u := URI{Token: "t", Object: "o;x", ID: []byte{0xab}, ModulePath: "/m.so", PIN: "s3cret-pin"}
	for _, s := range []string{u.String(), fmt.Sprintf("%v", u), fmt.Sprintf("%+v", u), fmt.Sprintf("%#v", u)} {
		if strings.Contains(s, "s3cret-pin") {
			t.Errorf("%q shows the PIN", s)
		}
	}
	back, err := ParseURI(u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if back.Object != u.Object || string(back.ID) != string(u.ID) || back.ModulePath != u.ModulePath {
		t.Errorf("round trip = %+v, want %+v without the PIN", back, u)
	}
}
