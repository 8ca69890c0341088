package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware/redisstore"
)

// TestDial connects by URL and (when the test database is 0, which is
// all an address can name) by address, records a key through a store on
// the client Dial made, and refuses specs that name no Redis.
func TestDial(t *testing.T) {
	c := testClient(t) // skips (or fails under CI) without Redis
	ctx := context.Background()
	specs := []string{testURL(t)} // the URL as given: its database number and password kept
	if o := c.Options(); o.DB == 0 && o.Password == "" {
		specs = append(specs, o.Addr) // a host:port spec names database 0
	}
	for _, spec := range specs {
		conn, err := redisstore.Dial(ctx, spec)
		if err != nil {
			t.Fatalf("Dial(%q): %v", spec, err)
		}
		if conn.Name() == "" || strings.Contains(conn.Name(), "@") {
			t.Errorf("Dial(%q).Name() = %q", spec, conn.Name())
		}
		s, err := redisstore.NewReplay(redisstore.Config{Client: conn.Client()})
		if err != nil {
			t.Fatal(err)
		}
		key := "dial-test " + spec + " " + time.Now().String()
		if seen, err := s.Seen(ctx, key, time.Now().Add(time.Minute)); err != nil || seen {
			t.Errorf("first Seen = %v, %v", seen, err)
		}
		if seen, err := s.Seen(ctx, key, time.Now().Add(time.Minute)); err != nil || !seen {
			t.Errorf("second Seen = %v, %v", seen, err)
		}
		// The key landed in the test's database, not in database 0.
		if n, err := c.Exists(ctx, s.Key(key)).Result(); err != nil || n != 1 {
			t.Errorf("Dial(%q): the key is not in database %d of the test URL (Exists = %d, %v)", spec, c.Options().DB, n, err)
		}
		c.Del(ctx, s.Key(key))
		if err := conn.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	for spec, want := range map[string]string{
		"http://redis.example":          "want redis://",
		"redis-host":                    `"redis-host" is not host:port`,
		"redis://127.0.0.1:1":           "Redis does not answer",
		"redis://u:secret@127.0.0.1:1/": "Redis does not answer",
	} {
		_, err := redisstore.Dial(ctx, spec)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Dial(%q) = %v, want an error containing %q without the password", spec, err, want)
		}
	}
}
