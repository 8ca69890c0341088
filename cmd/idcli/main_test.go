package main

import "testing"

// TestIsServing: idcli server start and idcli proxy run with the runtime's
// system monitor kept awake (package sysmon); no other command does.
func TestIsServing(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"server", "start", "--port", "0"}, {"server", "start"}, {"proxy", "--upstream", "http://127.0.0.1:8080"}, {"proxy"}} {
		if !isServing(args) {
			t.Errorf("isServing(%q) = false", args)
		}
	}
	for _, args := range [][]string{{"server"}, {"server", "init"}, {"agent", "proxy"}, {"start", "server"}, {"bench"}, nil} {
		if isServing(args) {
			t.Errorf("isServing(%q) = true", args)
		}
	}
}
