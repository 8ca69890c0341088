//go:build !unix

package refserver_test

import "time"

// processCPU is not measured on this system.
func processCPU() time.Duration { return 0 }
