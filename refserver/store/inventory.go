package store

import (
	"context"
	"fmt"
)

// Inventory is how many agents are in each state and how many keys are
// active or revoked (rotated away, revoked by an operator or claimed).
type Inventory struct {
	Agents map[string]int64 // by AgentStates; every state present, 0 included
	Keys   map[string]int64 // "active" and "revoked"
}

// inventorySQL counts agents by state (AgentState's precedence) and keys
// by state in one statement whatever the number of agents: a scan of
// agents joined (by hash or merge, not one probe per agent) to the set of
// uids holding an active key, and a scan of public_jwks. The literals are
// this package's constants.
var inventorySQL = fmt.Sprintf(`SELECT 'agents' AS family, state, COUNT(*) AS n FROM (
  SELECT CASE WHEN a.review = '%[1]s' THEN '%[3]s' WHEN a.review = '%[2]s' THEN '%[4]s'
    WHEN a.disabled_at IS NOT NULL THEN '%[5]s' WHEN k.agent_uid IS NULL THEN '%[6]s' ELSE '%[7]s' END AS state
  FROM agents a LEFT JOIN (SELECT DISTINCT agent_uid FROM public_jwks WHERE revoked_at IS NULL) k ON k.agent_uid = a.uid
) s GROUP BY state
UNION ALL
SELECT 'keys' AS family, state, COUNT(*) AS n FROM (
  SELECT CASE WHEN revoked_at IS NULL THEN 'active' ELSE 'revoked' END AS state FROM public_jwks
) s GROUP BY state`, ReviewRejected, ReviewPending, StateRejected, StatePending, StateDisabled, StateNoKeys, StateActive)

// CountInventory counts the agents by state and the keys by state with
// one aggregate statement (see inventorySQL); its cost grows with the
// number of rows, so callers bound how often they call it (the server's
// metrics: at most once per 15 s).
func (d *DB) CountInventory(ctx context.Context) (Inventory, error) {
	inv := Inventory{Agents: map[string]int64{}, Keys: map[string]int64{"active": 0, "revoked": 0}}
	for _, s := range AgentStates() {
		inv.Agents[s] = 0
	}
	rows, err := d.g.WithContext(ctx).Raw(inventorySQL).Rows()
	if err != nil {
		return Inventory{}, fmt.Errorf("store: count agents and keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var family, state string
		var n int64
		if err := rows.Scan(&family, &state, &n); err != nil {
			return Inventory{}, fmt.Errorf("store: count agents and keys: %w", err)
		}
		if family == "agents" {
			inv.Agents[state] = n
		} else {
			inv.Keys[state] = n
		}
	}
	if err := rows.Err(); err != nil {
		return Inventory{}, fmt.Errorf("store: count agents and keys: %w", err)
	}
	return inv, nil
}
