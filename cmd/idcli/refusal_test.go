package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/cmd/idcli/internal/clitest"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
)

// packagePrefix finds a Go-style package prefix in a message: a single
// lowercase word followed by ": ", at the start or after another ": "
// ("signer: …", "…: dir: …"). The segments a message means for the client
// ("directory_signatures[0]: ", "invalid signature input: ") are not of
// that shape.
var packagePrefix = regexp.MustCompile(`(^|: )([a-z][a-z0-9]*): `)

// TestRefusalsCarryNoPackagePrefix: what clients read of a refusal, the
// message of the JSON error body and what `idcli agent` prints as the
// server's answer, carries no internal prefix. Each row is a refusal that
// used to: a directory signature the reference server refuses (whose
// message showed the signer package's "signer: " and its made-up label
// "dir: "), and `idcli agent init` refused by the server ("agent: server
// answered …"). The code and the rest of the message are unchanged.
func TestRefusalsCarryNoPackagePrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := startServer(t, "--bind", "127.0.0.1")
	closed := startServer(t, "--bind", "127.0.0.1", "--registration", "closed")
	key := signertest.Key(0x5a)
	reg := clitest.MustSend(t, http.DefaultClient, srv.registerReq(t, key))
	if reg.Status != http.StatusCreated {
		t.Fatalf("register: %d %s", reg.Status, reg.Body)
	}
	uid := jsonField(t, reg.Body, "uid")
	svc, err := signer.ParseServiceURL(srv.base)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sig := base64.StdEncoding.EncodeToString(make([]byte, 64))
	params := ";created=" + strconv.FormatInt(now.Unix(), 10) + ";expires=" + strconv.FormatInt(now.Add(time.Hour).Unix(), 10) +
		`;keyid="` + key.Public.Thumbprint + `";alg="ed25519";tag="http-message-signatures-directory"`
	// dirSig is PUT /agents/{uid}/directory-signatures with one signature
	// whose input is input, signed by the agent; it returns the answer's
	// code and message.
	dirSig := func(input string) (string, string) {
		body, _ := json.Marshal(map[string]any{"directory_signatures": []map[string]string{{"signature_input": input, "signature": sig}}})
		req, err := http.NewRequest(http.MethodPut, srv.base+"/agents/"+uid+"/directory-signatures", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		clitest.Sign(t, req, key, signer.Options{Components: signer.WriteComponents, SignatureAgent: svc.AgentOrigin(uid)})
		a := clitest.MustSend(t, http.DefaultClient, req)
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal([]byte(a.Body), &e); err != nil {
			t.Fatalf("directory signature %q: %d %s: not a JSON error", input, a.Status, a.Body)
		}
		return e.Error.Code, e.Error.Message
	}
	agentInit := func(base string) (string, string) {
		r := runCLI(ctx, t.TempDir(), nil, "agent", "init", "--hostname", base)
		if r.err == nil {
			t.Fatalf("agent init on %s succeeded", base)
		}
		return "", r.err.Error()
	}

	for _, tt := range []struct {
		name     string
		refusal  func() (code, message string)
		wantCode string
		want     string // in the message
	}{
		{"directory signature input over 512 bytes",
			func() (string, string) { return dirSig(`(` + strings.Repeat(`"a" `, 200) + `)` + params) },
			"invalid_directory_signature", "invalid signature input: field too large: the input is"},
		{"directory signature covering 9 components",
			func() (string, string) { return dirSig(`("a" "b" "c" "d" "e" "f" "g" "h" "i")` + params) },
			"invalid_directory_signature", "invalid signature input: too many covered components: 9, more than 8"},
		{"directory signature covering a component twice",
			func() (string, string) { return dirSig(`("@authority";req "@authority";req)` + params) },
			"invalid_directory_signature", `invalid signature input: duplicate covered component "@authority";req`},
		{"directory signature with an upper-case component",
			func() (string, string) { return dirSig(`("Content-Digest")` + params) },
			"invalid_directory_signature", `invalid signature input: invalid component "Content-Digest"`},
		{"directory signature with a parameter of the wrong type",
			func() (string, string) { return dirSig(`("@authority";req);created="now"`) },
			"invalid_directory_signature", "invalid signature input: parameter created has the wrong type"},
		{"idcli agent init, registration closed",
			func() (string, string) { return agentInit(closed.base) },
			"", "server answered 403 forbidden: registration on this service is closed"},
	} {
		code, msg := tt.refusal()
		if code != tt.wantCode || !strings.Contains(msg, tt.want) {
			t.Errorf("%s: %s %q, want %s with %q", tt.name, code, msg, tt.wantCode, tt.want)
		}
		if m := packagePrefix.FindStringSubmatch(msg); m != nil {
			t.Errorf("%s: the message carries the prefix %q: %s", tt.name, m[2]+": ", msg)
		}
	}
}
