//go:build !linux

package benchtest

import "time"

// ThreadCPU is not measured outside Linux: it returns 0, and Paired then
// reports wall time only.
func ThreadCPU() time.Duration { return 0 }
