package refserver

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentid/agentid/refserver/store"
)

// housekeepingEvery is how often an instance prunes the audit trail past
// Config.AuditRetention, and the outbox rows every webhook has taken
// (store.PruneOutbox, after store.DefaultOutboxRetention). Every instance
// does (a prune is one DELETE by the database's clock, and two at once
// delete nothing twice).
const housekeepingEvery = time.Hour

// housekeep prunes the audit trail and the outbox at once and then every
// housekeepingEvery, until ctx is done.
func (s *Server) housekeep(ctx context.Context) {
	t := time.NewTicker(housekeepingEvery)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := s.db.PruneAudit(pctx, s.cfg.AuditRetention); err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "audit trail prune failed; tried again later", slog.String("cause", err.Error()))
		}
		if err := s.db.PruneOutbox(pctx, store.DefaultOutboxRetention); err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "outbox prune failed; tried again later", slog.String("cause", err.Error()))
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
