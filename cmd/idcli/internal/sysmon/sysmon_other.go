//go:build !unix

package sysmon

// Quiet does nothing where the process cannot be re-executed in place.
func Quiet() {}
