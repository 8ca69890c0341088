// Command idcli is the agentid command line: `idcli agent …` for agents and
// `idcli server …` for operators self-hosting the reference server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentid/agentid/cmd/idcli/internal/sysmon"
)

func main() {
	if isServing(os.Args[1:]) {
		sysmon.Quiet()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], newEnv())
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		fmt.Fprintln(os.Stderr, "idcli:", err)
		os.Exit(1)
	}
}

// isServing reports whether args (without the program name) run one of
// idcli's long-running servers: `idcli server start` or `idcli proxy`.
func isServing(args []string) bool {
	switch {
	case len(args) >= 2 && args[0] == "server" && args[1] == "start":
		return true
	case len(args) >= 1 && args[0] == "proxy":
		return true
	}
	return false
}
