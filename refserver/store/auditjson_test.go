package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentid/agentid/refserver/dbtest"
	"github.com/agentid/agentid/refserver/store"
)

// TestAuditEventJSON: an audit row's detail is written as the JSON
// object it holds (not the base64 of its bytes), omitted when the row
// has none, and read back as it was.
func TestAuditEventJSON(t *testing.T) {
	for _, b := range dbtest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			db := store.New(dbtest.Migrated(t, b.URL(t)))
			_, info, err := db.CreateInvite(ctx, "for ci", 2, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := db.Audit(ctx, store.AuditQuery{Action: store.ActionInviteCreate})
			if err != nil || len(rows) != 1 {
				t.Fatalf("Audit: %v, %d rows", err, len(rows))
			}
			b, err := json.Marshal(rows[0])
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Detail map[string]any `json:"detail"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("detail is not a JSON object: %v\n%s", err, b)
			}
			if id, _ := got.Detail["invitation_id"].(float64); uint64(id) != info.ID || got.Detail["uses"] != float64(2) {
				t.Errorf("detail = %v, want invitation_id %d and uses 2\n%s", got.Detail, info.ID, b)
			}
			var back store.AuditEvent
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if again, _ := json.Marshal(back); string(again) != string(b) {
				t.Errorf("round trip:\n%s\nwant\n%s", again, b)
			}
			none, _ := json.Marshal(store.AuditEvent{Action: store.ActionEnable})
			if strings.Contains(string(none), "detail") {
				t.Errorf("a row without detail: %s", none)
			}
		})
	}
}
