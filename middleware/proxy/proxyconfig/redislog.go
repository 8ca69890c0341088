package proxyconfig

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// redisLog carries the Redis client's own messages (its connection pool's
// retries, for one) to the operational log of the proxy built last, at
// debug level: the proxy words a Redis failure once, as an error of its
// own, and the client's lines would only repeat it in another format.
var (
	redisLogOnce sync.Once
	redisLogTo   atomic.Pointer[slog.Logger]
)

type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLogTo.Load(); l != nil {
		l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "redis")
	}
}

// routeRedisLog makes logger receive the Redis client's messages. The
// client's logger is global to the process: the last proxy built gets
// them.
func routeRedisLog(logger *slog.Logger) {
	redisLogTo.Store(logger)
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{}) })
}
