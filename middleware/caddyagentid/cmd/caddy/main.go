// Command caddy is Caddy with its standard modules and the agentid module
// (http.handlers.agentid):
//
//	go build -o caddy ./cmd/caddy
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	// Caddy's standard modules, and agentid's.
	_ "github.com/agentid/agentid/middleware/caddyagentid"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func main() { caddycmd.Main() }
