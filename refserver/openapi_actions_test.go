package refserver

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agentid/agentid/refserver/store"
)

// schemaEnum returns the enum items of property prop of the component
// schema schema in the OpenAPI file b, read line by line as readOpenAPI
// does: the schema at four spaces, its properties at eight, the enum's
// items below the property.
func schemaEnum(t *testing.T, b []byte, schema, prop string) []string {
	t.Helper()
	var items []string
	inSchema, inProp, inEnum := false, false, false
	for _, l := range strings.Split(string(b), "\n") {
		indent := len(l) - len(strings.TrimLeft(l, " "))
		trimmed := strings.TrimSpace(l)
		switch {
		case trimmed == "":
			continue
		case indent == 4:
			inSchema, inProp, inEnum = trimmed == schema+":", false, false
			continue
		case !inSchema:
			continue
		case indent == 8:
			inProp, inEnum = trimmed == prop+":", false
			continue
		case !inProp:
			continue
		case trimmed == "enum:":
			inEnum = true
			continue
		}
		if inEnum {
			if !strings.HasPrefix(trimmed, "- ") {
				inEnum = false
				continue
			}
			items = append(items, strings.Trim(strings.TrimPrefix(trimmed, "- "), `"'`))
		}
	}
	if len(items) == 0 {
		t.Fatalf("docs/openapi.yaml: no enum for %s.%s", schema, prop)
	}
	return items
}

// TestOpenAPIAuditActions: the enum of AuditEvent.action in
// docs/openapi.yaml is store.Actions(), in its order: every action the
// trail records (and the admin API's action filter takes) is documented,
// and nothing else.
func TestOpenAPIAuditActions(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := schemaEnum(t, b, "AuditEvent", "action"); !slices.Equal(got, store.Actions()) {
		t.Errorf("AuditEvent.action enum in docs/openapi.yaml:\n%s\nwant store.Actions():\n%s",
			strings.Join(got, "\n"), strings.Join(store.Actions(), "\n"))
	}
}
