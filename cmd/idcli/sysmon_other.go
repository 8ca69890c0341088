//go:build !unix

package main

// quietSysmon does nothing where the process cannot be re-executed in
// place.
func quietSysmon([]string) {}
