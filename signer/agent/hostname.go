package agent

import (
	"fmt"

	"github.com/agentid/agentid/signer"
)

// DefaultHostname is the service base URL used when neither an explicit
// hostname nor AGENT_HOSTNAME is configured.
const DefaultHostname = "http://localhost:3000"

// checkUID accepts a uid of the form signer.ValidUID checks (agent- and 24
// lowercase hex characters), which is what agentid and vestauth servers
// assign.
func checkUID(uid string) error {
	if uid == "" {
		return missingError(EnvUID)
	}
	if !signer.ValidUID(uid) {
		return &credError{kind: ErrInvalid, msg: fmt.Sprintf(
			"agent: invalid AGENT_UID %q: want %s followed by 24 lowercase hex characters, such as agent-0123456789abcdef01234567", truncate(uid), signer.UIDPrefix)}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
