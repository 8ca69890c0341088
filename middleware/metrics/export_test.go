package metrics

import "time"

// SetInventoryClock makes the inventory of r (CountInventory) read the
// time from now.
func SetInventoryClock(r *Registry, now func() time.Time) { r.inv.Load().now = now }
