package store

import (
	"strings"

	"github.com/agentid/agentid/signer/redact"
	"gorm.io/gorm"
)

// migrationV2WebhookCursor is webhook_cursors as changed by
// 20261211120000: the columns of 20261210140100, url now holding the
// webhook's name (redact.HostOnly: scheme, host, port and the first 8 hex
// digits of url_key) instead of the URL through redact.URL, which showed
// a secret written in the path.
type migrationV2WebhookCursor struct {
	ID        uint64 `gorm:"primaryKey"`
	URLKey    string `gorm:"column:url_key;size:64;not null;uniqueIndex"`
	URL       string `gorm:"column:url;size:500;not null"`
	LastError string `gorm:"column:last_error;size:500;not null"`
}

func (migrationV2WebhookCursor) TableName() string { return "webhook_cursors" }

// nameWebhookCursorsByHost rewrites the url of every cursor as its name
// and drops the URL from last_error (20261211120000). The URL itself was
// never stored: the name is read from the redacted form, whose host is
// the URL's, and its digits from url_key, the SHA-256 of the URL. A
// last_error still holding more than the URL's host afterwards is
// emptied (the next failure writes a new one). Rows already named are
// left alone.
func nameWebhookCursorsByHost(tx *gorm.DB) error {
	if !tx.Migrator().HasTable(&migrationV2WebhookCursor{}) {
		return nil
	}
	var rows []migrationV2WebhookCursor
	if err := tx.Order("id").Find(&rows).Error; err != nil {
		return err
	}
	for _, r := range rows {
		if len(r.URLKey) < 8 {
			continue
		}
		digits := "#" + r.URLKey[:8]
		if strings.HasSuffix(r.URL, digits) {
			continue
		}
		name := redact.HostOnly(r.URL)
		name = name[:strings.LastIndexByte(name, '#')] + digits
		lastError := strings.ReplaceAll(r.LastError, r.URL, name)
		if after := afterHost(r.URL); len(after) > 1 && strings.Contains(lastError, after) {
			lastError = ""
		}
		if err := tx.Model(&migrationV2WebhookCursor{}).Where("id = ?", r.ID).
			Updates(map[string]any{"url": clip(name, 500), "last_error": lastError}).Error; err != nil {
			return err
		}
	}
	return nil
}

// afterHost returns what follows the authority of the URL u: its path,
// query and fragment ("" when u has no "//").
func afterHost(u string) string {
	_, rest, ok := strings.Cut(u, "//")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/\\?#"); i >= 0 {
		return rest[i:]
	}
	return ""
}
