package middleware_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/signer"
)

// TestDebugLogsBaseMismatch: a signature that does not verify logs, at
// debug level, the base the verifier built (here with the method the
// request arrived with, not the one signed), and nothing at info level.
func TestDebugLogsBaseMismatch(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
		v, err := middleware.New(middleware.Config{Keys: staticKeys(), Authorities: testAuthorities, Now: clock, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		r := signedRequest(t, keyA, signOpts(func(o *signer.Options) { o.Components = []string{"@method", "@authority"} }))
		r.Method = http.MethodPost
		_, verr := v.Verify(r)
		if e := middleware.AsError(verr); e == nil || e.Code != middleware.CodeInvalidSignature {
			t.Fatalf("Verify error = %v, want %s", verr, middleware.CodeInvalidSignature)
		}
		got := buf.String()
		if level == slog.LevelInfo {
			if got != "" {
				t.Errorf("info-level log = %q, want nothing", got)
			}
			continue
		}
		for _, want := range []string{"signature base mismatch", `\"@method\": POST`, "kid=" + keyA.KeyID(), "label=sig1"} {
			if !strings.Contains(got, want) {
				t.Errorf("debug log =\n%s\nwant it to contain %q", got, want)
			}
		}
		if strings.Contains(got, keyA.JWK().D) {
			t.Error("debug log contains the private key")
		}
	}
}
