package agent_test

import (
	"crypto/ed25519"
	"fmt"
	"strings"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
)

func ExampleCredentials_Origin() {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	for _, h := range []string{"agentid.example", "http://localhost:3000/", "https://agentid.example/api"} {
		creds := agent.Credentials{UID: "agent-0123456789abcdef01234567", Key: key, Hostname: h}
		fmt.Println(creds.Origin())
	}
	// Output:
	// https://agent-0123456789abcdef01234567.agentid.example <nil>
	// http://agent-0123456789abcdef01234567.localhost:3000 <nil>
	//  signer: invalid service URL "https://agentid.example/api": a path is not allowed (give scheme://host[:port])
}

func ExampleHeaders() {
	key := signer.NewPrivateKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	creds := agent.Credentials{UID: "agent-0123456789abcdef01234567", Key: key, Hostname: "http://localhost:3000"}
	h, err := agent.Headers("GET", "https://api.example/resource", creds, "", "")
	if err != nil {
		panic(err)
	}
	fmt.Println(h.SignatureAgent)
	fmt.Println(strings.HasPrefix(h.SignatureInput, `sig1=("@authority" "signature-agent";key="sig1");created=`))
	// Output:
	// sig1="http://agent-0123456789abcdef01234567.localhost:3000"
	// true
}

func ExampleLoad_missing() {
	_, err := agent.Load(agent.LoadOptions{Dir: "testdata/none", Getenv: func(string) string { return "" }})
	fmt.Println(err)
	// Output:
	// agent: missing AGENT_UID: run `idcli agent init` or set AGENT_UID
}
