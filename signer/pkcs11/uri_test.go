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

// pinShapes are URIs that carry the PIN "SECRET-PIN-7" in shapes a user
// gets wrong (or an attacker who reads error output hopes for): each must
// be refused, or fail to open, without the PIN in any error or string.
var pinShapes = []string{
	"pkcs11:token=b;object=c?module-path=/nonexistent/libsofthsm2.so?pin-value=SECRET-PIN-7",
	"pkcs11:token=b;object=c?module-path=/nonexistent/m.so%3Fpin-value=SECRET-PIN-7",
	"pkcs11:token=b;object=c?module-path=/nonexistent/m.so%26pin-value%3DSECRET-PIN-7",
	"pkcs11:token=b;object=c?module-path=/nonexistent/m.so;pin-value=SECRET-PIN-7",
	"pkcs11:token=b;object=c?module-path=/nonexistent/m.so&pin%2Dvalue=SECRET-PIN-7",
	"pkcs11:token=b;object=c?module-path=/nonexistent/m.so&%70in-value=SECRET-PIN-7",
	"pkcs11:token=b;object=c?module-path=/nonexistent/m.so&PIN-VALUE=SECRET-PIN-7",
	"pkcs11:token=b;object=c?pin_value=SECRET-PIN-7&module-path=/nonexistent/m.so",
	"pkcs11:token=b;object=c?module-path=/nonexistent/m.so&pin-source=SECRET-PIN-7",
	"pkcs11:token=b;object=c?module-path=/nonexistent/m.so&SECRET-PIN-7",
	"pkcs11:token=b;object=c;pin-value=SECRET-PIN-7?module-path=/nonexistent/m.so",
	"pkcs11:token=b;object=c;pin-valueSECRET-PIN-7?module-path=/nonexistent/m.so",
	"pkcs11:token=b%3Bpin-value%3DSECRET-PIN-7;object=c?module-path=/nonexistent/m.so",
	"pkcs11:token=b;object=c%3Fpin%2Dvalue%3DSECRET-PIN-7?module-path=/nonexistent/m.so",
	"pkcs11:token=b;object=c;type=pin-value%3DSECRET-PIN-7?module-path=/nonexistent/m.so",
	"pkcs11:token=b;object=c?module-path=/nonexistent/m.so&pin-value=SECRET-PIN-7", // well formed: Open fails on the module
}

// TestPINNeverPrinted: whatever the URI's shape, the PIN is in no error of
// ParseURI or Open and in no string of the parsed URI.
func TestPINNeverPrinted(t *testing.T) {
	t.Parallel()
	const pin = "SECRET-PIN-7"
	for _, in := range pinShapes {
		u, err := ParseURI(in, nil)
		if err != nil {
			if strings.Contains(err.Error(), pin) {
				t.Errorf("ParseURI(%s): error %q shows the PIN", Redact(in), err)
			}
			continue
		}
		shown := []string{u.String(), fmt.Sprintf("%v", u), fmt.Sprintf("%+v", u), fmt.Sprintf("%#v", u), fmt.Sprint(u.ModulePath, u.Token, u.Object)}
		if k, err := Open(u); err == nil {
			k.Close()
			t.Errorf("Open(%s) succeeded", Redact(in))
		} else {
			shown = append(shown, err.Error())
		}
		if k, err := Generate(u); err == nil {
			k.Close()
			t.Errorf("Generate(%s) succeeded", Redact(in))
		} else {
			shown = append(shown, err.Error())
		}
		for _, s := range shown {
			if strings.Contains(s, pin) {
				t.Errorf("%s: %q shows the PIN", Redact(in), s)
			}
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/usr/lib/m.so":                         "/usr/lib/m.so",
		"/usr/lib/m.so?pin-value=1234":          "/usr/lib/m.so?<redacted>",
		"pkcs11:token=a?PIN%2dVALUE=1234&x=y":   "pkcs11:token=a?<redacted>",
		"x%70%69%6E_source=file:/p":             "x<redacted>",
		"pin-valu":                              "pin-valu",
		"pin-":                                  "pin-",
		"%":                                     "%",
		"pi%6":                                  "pi%6",
		"pin%2Xvalue=1":                         "pin%2Xvalue=1",
		"pkcs11:token=pin;object=pinned-value":  "pkcs11:token=pin;object=pinned-value",
		"pkcs11:token=a;object=b?pin-source=%7": "pkcs11:token=a;object=b?<redacted>",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
