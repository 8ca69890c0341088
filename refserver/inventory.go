package refserver

import (
	"context"
	"log/slog"

	"github.com/agentid/agentid/middleware/metrics"
)

// countInventory counts the agents and keys for the metrics (with
// Config.Metrics, which calls it from a scrape at most once per
// metrics.MinInventoryEvery): one aggregate statement, never a query per
// agent; the labels are states, never identities.
func (s *Server) countInventory(ctx context.Context) (metrics.Inventory, error) {
	ctx, cancel := s.dbContext(ctx)
	defer cancel()
	inv, err := s.db.CountInventory(ctx)
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "counting agents and keys for the metrics failed; the last count is served", slog.String("cause", err.Error()))
		return metrics.Inventory{}, err
	}
	return metrics.Inventory(inv), nil
}
