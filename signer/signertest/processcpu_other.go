//go:build !unix

package signertest

import "time"

// ProcessCPU is not measured on this system: it returns 0.
func ProcessCPU() time.Duration { return 0 }
