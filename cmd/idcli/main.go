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
)

func main() {
	quietSysmon(os.Args[1:])
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
