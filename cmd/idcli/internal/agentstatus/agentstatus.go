// Package agentstatus is `idcli agent status`: the state of this agent at
// its service, as a GET /whoami signed with its key tells it — active,
// pending the operator's review, rejected (with the operator's reason),
// disabled, or not known there (a revoked or unknown key). idcli's main
// package mounts it with Command, handing over what it needs in an Env.
package agentstatus

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// Env is what the command takes from idcli's main package.
type Env struct {
	Stdout io.Writer
	// Dir is the working directory, whose .env holds the credentials.
	Dir string
	// Getenv reads the process environment.
	Getenv func(string) string
	// FlagSet is the command's flag set, reporting its errors and usage
	// the way every idcli command does.
	FlagSet *flag.FlagSet
	// Parse parses the flags of fs wherever they appear in args and
	// refuses any positional argument.
	Parse func(fs *flag.FlagSet, args []string) error
	// Key registers the flags naming a key held in a token (PKCS#11) on
	// fs and returns the opener of that key: the zero key when none is
	// named (the credentials' own key signs), and its close.
	Key func(fs *flag.FlagSet) func() (signer.PrivateKey, func(), error)
	// Transport sends the request (nil: http.DefaultTransport).
	Transport http.RoundTripper
}

// States of an agent at its service (Status.State).
const (
	StateActive   = "active"   // its requests verify
	StatePending  = "pending"  // waiting for the operator's approval
	StateRejected = "rejected" // the operator refused it, for Reason
	StateDisabled = "disabled" // the operator disabled it
	StateRevoked  = "revoked"  // this key was revoked
	StateUnknown  = "unknown"  // the service does not know this key
)

// Status is the agent's state at its service, as --json prints it.
type Status struct {
	UID      string `json:"uid"`
	Kid      string `json:"kid"`
	Hostname string `json:"hostname"`
	State    string `json:"state"`
	// Reason is the operator's reason for a rejection.
	Reason string `json:"reason,omitempty"`
	// Message is the service's refusal, when the agent is not active.
	Message string `json:"message,omitempty"`
}

// timeout bounds the request.
const timeout = 30 * time.Second

// Command returns `idcli agent status`.
func Command(env Env) *ffcli.Command {
	fs := env.FlagSet
	uid := fs.String("uid", "", "agent uid (default: AGENT_UID)")
	privateJWK := fs.String("private-jwk", "", "private JWK as JSON (default: AGENT_PRIVATE_JWK)")
	hostname := fs.String("hostname", "", "service base URL (default: AGENT_HOSTNAME, then "+agent.DefaultHostname+")")
	asJSON := fs.Bool("json", false, "print the state as JSON")
	openKey := env.Key(fs)
	return &ffcli.Command{
		Name:       "status",
		ShortUsage: "idcli agent status [--uid U] [--private-jwk JWK] [--hostname H] [--pkcs11-uri URI] [--json]",
		ShortHelp:  "show this agent's state at its service: active, pending review, rejected (and why), disabled",
		LongHelp: "Sends GET /whoami signed with the agent's key; the service's answer tells the state.\n" +
			"The operator's reason for a rejection is told only to a request the agent's key signed.\n" +
			`With --json: {"uid","kid","hostname","state","reason" (a rejection's),"message" (the service's refusal)};` + "\n" +
			"state is one of active, pending, rejected, disabled, revoked (this key), unknown (the\n" +
			"service does not know the key). It exits 0 whatever the state, 1 when the service\n" +
			"gives no state (unreachable, a clock off, a database down).",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if err := env.Parse(fs, args); err != nil {
				return err
			}
			key, closeKey, err := openKey()
			if err != nil {
				return err
			}
			defer closeKey()
			creds, err := agent.Load(agent.LoadOptions{Dir: env.Dir, Getenv: env.Getenv,
				UID: *uid, PrivateJWK: *privateJWK, Hostname: *hostname, Key: key})
			if err != nil {
				return err
			}
			st, err := Check(ctx, creds, env.Transport)
			if err != nil {
				return err
			}
			if *asJSON {
				enc := json.NewEncoder(env.Stdout)
				enc.SetEscapeHTML(false)
				return enc.Encode(st)
			}
			st.print(env.Stdout)
			return nil
		},
	}
}

// Check sends GET {hostname}/whoami signed with creds (through base; nil:
// http.DefaultTransport) and returns the state the answer tells, or an
// error when it tells none.
func Check(ctx context.Context, creds agent.Credentials, base http.RoundTripper) (Status, error) {
	st := Status{UID: creds.UID, Kid: creds.Key.KeyID(), Hostname: creds.Hostname}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	svc, err := signer.ParseServiceURL(creds.Hostname)
	if err != nil {
		return st, fmt.Errorf("agent status: %w", err)
	}
	url := svc.String() + "/whoami"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, fmt.Errorf("agent status: %w", err)
	}
	resp, err := creds.Client(base).Do(req)
	if err != nil {
		return st, fmt.Errorf("agent status: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return st, fmt.Errorf("agent status: GET %s: %w", url, err)
	}
	if resp.StatusCode == http.StatusOK {
		var who struct {
			UID string `json:"uid"`
		}
		if json.Unmarshal(body, &who) != nil || who.UID != creds.UID {
			return st, fmt.Errorf("agent status: GET %s answered 200 for %q, not for %s: is AGENT_HOSTNAME an agentid service?", url, signer.Truncate(who.UID), creds.UID)
		}
		st.State = StateActive
		return st, nil
	}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
		return st, fmt.Errorf("agent status: GET %s answered %d and no agentid error: is AGENT_HOSTNAME an agentid service?", url, resp.StatusCode)
	}
	// The service's words reach a terminal: no control characters.
	st.Message = printable(e.Error.Message)
	switch code := e.Error.Code; {
	case resp.StatusCode == http.StatusForbidden && code == "agent_pending":
		st.State = StatePending
	case resp.StatusCode == http.StatusForbidden && code == "agent_rejected":
		st.State = StateRejected
		// The service's words: "agent <uid> was rejected by the operator
		// of this service: <reason>".
		_, st.Reason, _ = strings.Cut(st.Message, " was rejected by the operator of this service: ")
	case resp.StatusCode == http.StatusForbidden && code == "forbidden":
		st.State = StateDisabled
	case resp.StatusCode == http.StatusUnauthorized && code == "revoked_key":
		st.State = StateRevoked
	case resp.StatusCode == http.StatusUnauthorized && code == "unknown_key":
		st.State = StateUnknown
	default:
		return st, fmt.Errorf("agent status: the service answered %d %s: %s", resp.StatusCode, printable(code), st.Message)
	}
	return st, nil
}

// print writes the state for a person.
func (st Status) print(w io.Writer) {
	switch st.State {
	case StateActive:
		fmt.Fprintf(w, "✔ agent %s is active at %s (key %s)\n", st.UID, st.Hostname, st.Kid)
	case StatePending:
		fmt.Fprintf(w, "• agent %s is pending review at %s: its operator has not approved it yet\n", st.UID, st.Hostname)
		fmt.Fprintln(w, "⮕ once approved, sign its key directory: [idcli agent directory refresh]")
	case StateRejected:
		reason := st.Reason
		if reason == "" {
			reason = "no reason told"
		}
		fmt.Fprintf(w, "✘ agent %s was rejected by the operator of %s: %s\n", st.UID, st.Hostname, reason)
	case StateDisabled:
		fmt.Fprintf(w, "✘ agent %s is disabled by the operator of %s\n", st.UID, st.Hostname)
	case StateRevoked:
		fmt.Fprintf(w, "✘ key %s of agent %s is revoked at %s: it signs for nothing any more\n", st.Kid, st.UID, st.Hostname)
	default:
		fmt.Fprintf(w, "✘ %s does not know key %s of agent %s (the agent was deleted, or AGENT_HOSTNAME names another service)\n", st.Hostname, st.Kid, st.UID)
	}
}

// printable drops the control characters (C0, DEL, C1) of s, which a
// service could send to drive the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f {
			return -1
		}
		return r
	}, s)
}
