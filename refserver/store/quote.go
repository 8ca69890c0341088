package store

import (
	"strconv"
	"strings"
	"unicode"
)

// The one quoter of database names: QuoteName writes a name for people
// (messages, the CLI's output), quoteIdent for PostgreSQL (CREATE and DROP
// DATABASE). A name comes from DATABASE_URL, so it may hold any
// character.

// QuoteName returns name for a message, in single quotes as an SQL
// string literal writes it: a quote in the name is doubled, and a
// character that does not print (a control character, a line break) is
// written as a Go escape, so a name cannot end the quotes early or forge
// a line of output.
func QuoteName(name string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range name {
		switch {
		case r == '\'':
			b.WriteString("''")
		case !unicode.IsPrint(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// quoteIdent quotes a PostgreSQL identifier: a double quote in name is
// doubled, so name is one identifier whatever it holds.
func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
