//go:build !linux

package signertest

import "time"

// threadCPU is not measured outside Linux: Paired then reports wall time
// only.
func threadCPU() time.Duration { return 0 }
