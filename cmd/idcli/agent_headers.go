package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/agent"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// newAgentHeadersCmd is `idcli agent headers METHOD URL`.
func newAgentHeadersCmd(env *cliEnv) *ffcli.Command {
	fs := newFlagSet("idcli agent headers", env)
	pp := fs.Bool("pp", false, "pretty-print the JSON")
	uid := fs.String("uid", "", "agent uid (default: AGENT_UID)")
	privateJWK := fs.String("private-jwk", "", "private JWK as JSON (default: AGENT_PRIVATE_JWK)")
	hostname := fs.String("hostname", "", "service base URL (default: AGENT_HOSTNAME, then "+agent.DefaultHostname+")")
	tag := fs.String("tag", "", "tag parameter (default: web-bot-auth)")
	nonce := fs.String("nonce", "", "nonce parameter (default: 64 random bytes, base64url)")
	standards := fs.Bool("standards", false, `cover "signature-agent";key="sig1" even with --legacy`)
	legacy := fs.Bool("legacy", false, legacyUsage)
	var metadata stringsFlag
	fs.Var(&metadata, "metadata", metadataUsage)
	components := fs.String("components", "", headersComponentsUsage)
	p11URI := pkcs11URIFlag(fs)
	explain := fs.Bool("explain", false, "also print the signature base and the outcome of each check to stderr")
	return &ffcli.Command{
		Name:       "headers",
		ShortUsage: "idcli agent headers METHOD URL [--pp] [--uid U] [--private-jwk JWK] [--hostname H] [--tag T] [--nonce N] [--components C,…] [--standards] [--legacy] [--metadata K=V]… [--pkcs11-uri URI] [--explain]",
		ShortHelp:  "print the Signature, Signature-Input and Signature-Agent headers for a request",
		LongHelp: "Prints the headers as JSON. A standard METHOD is upper-cased (get signs GET), as\n" +
			"agent curl sends it; any other method is signed as typed.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := env.positional(fs, args, 2, "idcli agent headers METHOD URL [flags]", "agent headers: want METHOD and URL")
			if err != nil {
				return err
			}
			tk, err := env.openTokenKey(*p11URI, false)
			if err != nil {
				return err
			}
			defer tk.Close()
			creds, err := agent.Load(agent.LoadOptions{
				Dir: env.Dir, Getenv: env.Getenv,
				UID: *uid, PrivateJWK: *privateJWK, Hostname: *hostname,
				Key: tk.Signing(),
			})
			if err != nil {
				return err
			}
			comps, err := parseComponents(*components)
			if err != nil {
				return err
			}
			if slices.Contains(comps, "content-digest") {
				return errors.New("agent headers: content-digest needs a body, and agent headers signs none: use agent curl -d BODY --components …")
			}
			if err := checkURL("agent headers", pos[1]); err != nil {
				return err
			}
			method, err := normalizeMethod("agent headers", pos[0])
			if err != nil {
				return err
			}
			opts, err := creds.Options()
			if err != nil {
				return err
			}
			opts.Tag, opts.Nonce, opts.Standards, opts.Components, opts.Legacy = *tag, *nonce, *standards, comps, *legacy
			if opts.Metadata, err = parseMetadata(metadata); err != nil {
				return fmt.Errorf("agent headers: %w", err)
			}
			h, err := signer.Headers(method, pos[1], creds.Key, opts)
			if err != nil {
				return fmt.Errorf("agent headers: %w", err)
			}
			if *explain {
				explainHeaders(env, method, pos[1], h, creds.Key, tk != nil)
			}
			return writeJSON(env.Stdout, h, *pp)
		},
	}
}
