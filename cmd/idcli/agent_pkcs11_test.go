package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestPKCS11PINNeverPrinted: whatever shape --pkcs11-uri (or
// AGENT_PKCS11_URI) has, the PIN it carries is in no error, output or help
// text of the agent commands; the module it names does not exist, so every
// run fails.
func TestPKCS11PINNeverPrinted(t *testing.T) {
	t.Parallel()
	const pin = "SECRET-PIN-7"
	shapes := []string{
		"pkcs11:token=b;object=c?module-path=/nonexistent/libsofthsm2.so?pin-value=" + pin,
		"pkcs11:token=b;object=c?module-path=/nonexistent/m.so&pin%2Dvalue=" + pin,
		"pkcs11:token=b;object=c?module-path=/nonexistent/m.so%3Fpin-value=" + pin,
		"pkcs11:token=b;object=c;pin-value=" + pin + "?module-path=/nonexistent/m.so",
		"pkcs11:token=b%3Bpin-value%3D" + pin + ";object=c?module-path=/nonexistent/m.so",
		"pkcs11:token=b;object=c?module-path=/nonexistent/m.so&pin-value=" + pin,
	}
	dir := t.TempDir()
	for i, uri := range shapes {
		for _, run := range []struct {
			env  map[string]string
			args []string
		}{
			{nil, []string{"agent", "headers", "GET", "https://api.example/x", "--pkcs11-uri", uri}},
			{nil, []string{"agent", "curl", "http://127.0.0.1:1/x", "--pkcs11-uri=" + uri}},
			{nil, []string{"agent", "init", "--hostname", "http://127.0.0.1:1", "--pkcs11-uri", uri}},
			{nil, []string{"agent", "rotate", "--pkcs11-uri", uri}},
			{map[string]string{envPKCS11URI: uri}, []string{"agent", "headers", "GET", "https://api.example/x"}},
			{nil, []string{"agent", "headers", "GET", "https://api.example/x", "--pkcs11-ur=" + uri}},
			{map[string]string{envPKCS11URI: uri}, []string{"agent", "init", "--help"}},
		} {
			r := runCLI(t.Context(), dir, run.env, run.args...)
			all := r.stdout + r.stderr + fmt.Sprint(r.err)
			if strings.Contains(all, pin) {
				t.Errorf("shape %d, idcli %s: the PIN is printed:\n%s", i, strings.Join(run.args[:2], " "), all)
			}
			if r.err == nil && !strings.Contains(strings.Join(run.args, " "), "--help") {
				t.Errorf("shape %d, idcli %s: succeeded, want an error", i, strings.Join(run.args[:2], " "))
			}
		}
	}
}
