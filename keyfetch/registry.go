package keyfetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/redact"
)

// RegistryMediaType is the media type of a registry list: plain text.
const RegistryMediaType = "text/plain"

// Limits on what is kept of a card and of a registry's problems.
const (
	maxCardField    = 256 // bytes of one card string kept
	maxCardContacts = 8
	maxRegistryLine = 2048 // a longer line is skipped
	maxProblems     = 20   // problems kept per registry refresh
	registryWorkers = 2    // card fetches in flight per refresh
)

// RegistryStatus describes one registry of Config.Registries, for status
// pages and logs.
type RegistryStatus struct {
	// URL is the registry's URL.
	URL string
	// Entries is the number of card URLs in the last good list; Cards, how
	// many of them were fetched and read.
	Entries, Cards int
	// Updated is when the list was last fetched successfully (200 or 304);
	// Checked, when a refresh last ran. Zero when never.
	Updated, Checked time.Time
	// Err is the last refresh's failure to fetch or read the list, nil if
	// it succeeded. The last good list stays in force either way.
	Err error
	// Problems lists skipped lines and failed card fetches of the last
	// refresh (at most 20).
	Problems []string
}

// registryList is one registry's state. Guarded by Fetcher.regMu.
type registryList struct {
	url                string
	etag, lastModified string
	has                bool     // a list was read: entries is the last good list
	entries            []string // normalised card URLs
	cards              map[string]*cardState
	updated, checked   time.Time
	err                error
	problems           []string
}

// registryTrust is what the registries trust, published atomically.
// origins and urls say which key sets may be fetched; cards and keySets
// which key sets a card's claims describe (CardInfo).
type registryTrust struct {
	origins map[string]*Card // scheme://host:port of each card URL
	urls    map[string]*Card // each card's jwks_uri, exactly
	cards   map[string]*Card // each card by its own URL
	keySets map[string]*Card // each card's jwks_uri on the card's own origin
}

// listedByRegistry reports whether a registry vouches for rawURL: its
// origin is a listed card's, or it is a listed card's jwks_uri.
func (f *Fetcher) listedByRegistry(rawURL string, t checkedURL) bool {
	rt := f.regTrust.Load()
	if rt == nil {
		return false
	}
	if _, ok := rt.urls[rawURL]; ok {
		return true
	}
	_, ok := rt.origins[t.origin()]
	return ok
}

// Registries reports the state of each registry of Config.Registries, in
// order.
func (f *Fetcher) Registries() []RegistryStatus {
	f.regMu.Lock()
	defer f.regMu.Unlock()
	out := make([]RegistryStatus, 0, len(f.regs))
	for _, l := range f.regs {
		st := RegistryStatus{URL: l.url, Entries: len(l.entries), Updated: l.updated, Checked: l.checked, Err: l.err, Problems: slices.Clone(l.problems)}
		for _, u := range l.entries {
			if cs := l.cards[u]; cs != nil && !cs.card.Fetched.IsZero() {
				st.Cards++
			}
		}
		out = append(out, st)
	}
	return out
}

// WatchRegistries refreshes the registries at once, then every
// RegistryRefresh, until ctx ends; failures are logged (Config.Logger) and
// the last good lists kept. It returns at once when Config.Registries is empty. Run it
// in its own goroutine.
func (f *Fetcher) WatchRegistries(ctx context.Context) {
	if len(f.regs) == 0 {
		return
	}
	tick := time.NewTicker(f.cfg.RegistryRefresh)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, f.cfg.RegistryRefresh)
		_ = f.RefreshRegistries(rctx) // each failure is logged, and reported by Registries
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// RefreshRegistries fetches each registry list (conditionally: If-None-Match,
// If-Modified-Since) and each card it lists (If-None-Match), then publishes
// what they trust. A list that cannot be fetched or read keeps its last good
// version; a card that cannot be fetched keeps what was last read of it
// (its origin stays trusted while the list names it). A card dropped from
// every list is no longer trusted, and key sets cached under URLs no longer
// trusted are dropped. The error joins each list's failure; card failures
// are only in Registries' Problems. Refreshes are serialised.
func (f *Fetcher) RefreshRegistries(ctx context.Context) error {
	if len(f.regs) == 0 {
		return nil
	}
	f.regMu.Lock()
	defer f.regMu.Unlock()
	var errs []error
	for _, l := range f.regs {
		if err := f.refreshList(ctx, l); err != nil {
			errs = append(errs, err)
		}
	}
	f.publishTrust()
	return errors.Join(errs...)
}

// refreshList refreshes one registry: its list, then its cards.
func (f *Fetcher) refreshList(ctx context.Context, l *registryList) error {
	l.checked, l.problems = f.cfg.Now(), nil
	l.err = f.fetchList(ctx, l)
	if l.err != nil {
		f.cfg.Logger.Warn("keyfetch: registry list refused: the last good list stays in force", "registry", redact.URL(l.url), "err", l.err)
	}
	f.fetchCards(ctx, l)
	listed := make(map[string]bool, len(l.entries))
	for _, u := range l.entries {
		listed[u] = true
	}
	for u := range l.cards { // forget the cards the list no longer names
		if !listed[u] {
			delete(l.cards, u)
		}
	}
	return l.err
}

// fetchList fetches and reads l's list, replacing l.entries on success.
func (f *Fetcher) fetchList(ctx context.Context, l *registryList) error {
	tctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	d := docRequest{
		url: l.url, accept: RegistryMediaType, maxBytes: f.cfg.MaxRegistryBytes,
		accepts:    func(mt string) bool { return mt == RegistryMediaType },
		mediaTypes: RegistryMediaType,
	}
	if l.has {
		d.etag, d.lastModified = l.etag, l.lastModified
	}
	r, err := f.fetchDoc(tctx, d)
	switch {
	case err != nil:
		return fmt.Errorf("keyfetch: registry %s: %w", redact.URL(l.url), err)
	case r.notFound:
		return &FetchError{URL: l.url, StatusCode: r.status, Err: fmt.Errorf("registry: status %d", r.status)}
	case r.notModified:
		l.updated = f.cfg.Now()
		return nil
	}
	if _, params, _ := mime.ParseMediaType(r.contentType); params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8") && !strings.EqualFold(params["charset"], "us-ascii") {
		return &FetchError{URL: l.url, StatusCode: r.status, Err: fmt.Errorf("registry: charset %q is not utf-8", signer.Truncate(params["charset"]))}
	}
	entries, problems, err := f.parseRegistry(r.body)
	if err != nil {
		return &FetchError{URL: l.url, StatusCode: r.status, Err: err}
	}
	l.has, l.entries, l.etag, l.lastModified, l.updated = true, entries, r.etag, r.lastModified, f.cfg.Now()
	l.problems = append(l.problems, problems...)
	return nil
}

// parseRegistry reads a registry list: one card URL a line (lines end
// with LF, CRLF or CR); a "#" at the start of a line or after a space or
// tab starts a comment, which runs to the end of the line; lines blank
// once the comment is cut are ignored. So "https://bot.example/card #
// primary" is the card https://bot.example/card, while a "#" inside a URL
// (a fragment) stays and makes the line unusable. The body
// must be UTF-8 text without NUL; more than MaxRegistryEntries URLs
// refuse the whole list (the accepted list never depends on its order).
// A line that is no usable card URL is skipped and described in problems.
// The cost is linear in the body's size.
func (f *Fetcher) parseRegistry(body []byte) (entries, problems []string, err error) {
	if bytes.IndexByte(body, 0) >= 0 || !utf8.Valid(body) {
		return nil, nil, errors.New("registry: not UTF-8 text (binary data)")
	}
	seen := map[string]bool{}
	problem := func(n int, format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Sprintf("registry line %d: ", n)+fmt.Sprintf(format, args...))
		}
	}
	lines := 0
	for n := 1; len(body) > 0; n++ {
		var line []byte
		if i := bytes.IndexAny(body, "\r\n"); i < 0 {
			line, body = body, nil
		} else {
			crlf := body[i] == '\r' && i+1 < len(body) && body[i+1] == '\n'
			line, body = body[:i], body[i+1:]
			if crlf {
				body = body[1:]
			}
		}
		line = bytes.TrimSpace(stripComment(line))
		if len(line) == 0 {
			continue
		}
		if lines++; lines > f.cfg.MaxRegistryEntries {
			return nil, nil, fmt.Errorf("registry: more than %d entries (MaxRegistryEntries)", f.cfg.MaxRegistryEntries)
		}
		if len(line) > maxRegistryLine {
			problem(n, "longer than %d bytes, skipped", maxRegistryLine)
			continue
		}
		raw := string(line)
		u, err := f.cardURL(raw)
		if err != nil {
			problem(n, "%v, skipped", err)
			continue
		}
		if !seen[u] {
			seen[u] = true
			entries = append(entries, u)
		}
	}
	return entries, problems, nil
}

// stripComment cuts line at its comment: a "#" at its start or after a
// space, tab, vertical tab or form feed.
func stripComment(line []byte) []byte {
	for i, c := range line {
		if c == '#' && (i == 0 || strings.IndexByte(" \t\v\f", line[i-1]) >= 0) {
			return line[:i]
		}
	}
	return line
}

// cardURL normalises a registry entry as a Signature-Agent URL is
// normalised, and checks that it names a document (has a path) that the
// trust policy's scheme rule allows.
func (f *Fetcher) cardURL(raw string) (string, error) {
	if !strings.Contains(raw, "://") {
		return "", fmt.Errorf("%q is not an absolute URL", signer.Truncate(raw))
	}
	ks, err := signer.ParseKeySetURL(raw)
	if err != nil {
		return "", fmt.Errorf("%q: %s", signer.Truncate(raw), strings.TrimPrefix(err.Error(), "signer: "))
	}
	if ks.Identity() == ks.Origin() {
		return "", fmt.Errorf("%q names an origin, not a card", signer.Truncate(raw))
	}
	if _, err := f.checkURL(ks.URL); err != nil {
		return "", errors.New(strings.TrimPrefix(err.Error(), "keyfetch: "))
	}
	return ks.URL, nil
}

// publishTrust rebuilds what the registries trust from their last good
// lists and cards, publishes it, and drops cached key sets whose URLs are
// no longer trusted. f.regMu must be held.
func (f *Fetcher) publishTrust() {
	rt := &registryTrust{origins: map[string]*Card{}, urls: map[string]*Card{}, cards: map[string]*Card{}, keySets: map[string]*Card{}}
	for _, l := range f.regs {
		for _, u := range l.entries {
			cs := l.cards[u]
			if cs == nil {
				cs = &cardState{card: Card{URL: u, Registry: l.url}}
			}
			c := &cs.card
			if t, err := f.checkURL(u); err == nil {
				if _, dup := rt.origins[t.origin()]; !dup {
					rt.origins[t.origin()] = c
				}
			}
			if _, dup := rt.cards[u]; !dup {
				rt.cards[u] = c
			}
			if c.JWKSURI != "" {
				if _, dup := rt.urls[c.JWKSURI]; !dup {
					rt.urls[c.JWKSURI] = c
				}
				if _, dup := rt.keySets[c.JWKSURI]; !dup && f.sameOrigin(c.JWKSURI, u) {
					rt.keySets[c.JWKSURI] = c
				}
			}
		}
	}
	old := f.regTrust.Swap(rt)
	if old == nil || !lostTrust(old, rt) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	drop := func(k cacheKey, _ *entry) bool { return f.TrustURL(k.url) != nil }
	f.entries.RemoveFunc(drop)
	f.probation.RemoveFunc(drop)
	f.cfg.Logger.Info("keyfetch: registries no longer list some agents: their cached key sets are dropped")
}

// lostTrust reports whether old trusts something cur does not.
func lostTrust(old, cur *registryTrust) bool {
	for k := range old.origins {
		if _, ok := cur.origins[k]; !ok {
			return true
		}
	}
	for k := range old.urls {
		if _, ok := cur.urls[k]; !ok {
			return true
		}
	}
	return false
}
