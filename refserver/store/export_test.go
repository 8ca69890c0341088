package store

// SetFailAfterAudit makes every transaction that records action fail right
// after its audit and outbox rows are written (nil: none), until the test
// ends.
func SetFailAfterAudit(t interface{ Cleanup(func()) }, action string, err error) {
	failAfterAudit = func(a string) error {
		if a == action {
			return err
		}
		return nil
	}
	t.Cleanup(func() { failAfterAudit = nil })
}
