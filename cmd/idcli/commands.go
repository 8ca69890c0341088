package main

import "github.com/peterbourgon/ff/v3/ffcli"

// extraCommands lists the top-level commands besides agent and server
// (demo, proxy, tool, directory, bench, version). Each lives in its own file.
func extraCommands(env *cliEnv) []*ffcli.Command {
	var cmds []*ffcli.Command
	cmds = append(cmds, newDemoCmd(env))
	cmds = append(cmds, newProxyCmd(env))
	cmds = append(cmds, newToolCmd(env))
	cmds = append(cmds, newDirectoryCmd(env))
	cmds = append(cmds, newBenchCmd(env))
	cmds = append(cmds, newVersionCmd(env))
	return cmds
}
