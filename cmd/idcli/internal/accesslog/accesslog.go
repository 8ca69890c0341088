// Package accesslog formats the access log lines of idcli proxy: a
// slog.Handler that writes each line exactly as slog.NewJSONHandler does,
// for less CPU.
package accesslog

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Handler writes the proxy's access log lines exactly as
// slog.NewJSONHandler(w, nil) does, for less CPU: a line whose attributes
// are all strings, integers and floats (every line the proxy logs) is
// formatted here, anything else by the JSON handler itself. (The JSON
// handler formats each float through encoding/json, and each line through
// its generic attribute walk.)
type Handler struct {
	w    io.Writer
	json slog.Handler

	mu  sync.Mutex
	buf []byte
}

// New returns a Handler writing to w.
func New(w io.Writer) *Handler {
	return &Handler{w: w, json: slog.NewJSONHandler(w, nil)}
}

func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.json.Enabled(ctx, l)
}

func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler { return h.json.WithAttrs(attrs) }
func (h *Handler) WithGroup(name string) slog.Handler       { return h.json.WithGroup(name) }

func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if !plainRecord(r) {
		return h.json.Handle(ctx, r)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b := append(h.buf[:0], `{"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"`...)
	b = append(b, r.Level.String()...)
	b = append(b, `","msg":`...)
	b = appendJSONString(b, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Equal(slog.Attr{}) {
			return true // the JSON handler skips empty attributes too
		}
		b = append(b, ',')
		b = appendJSONString(b, a.Key)
		b = append(b, ':')
		switch v := a.Value; v.Kind() {
		case slog.KindString:
			b = appendJSONString(b, v.String())
		case slog.KindInt64:
			b = strconv.AppendInt(b, v.Int64(), 10)
		case slog.KindFloat64:
			// encoding/json's form in the range plainRecord admits.
			b = strconv.AppendFloat(b, v.Float64(), 'f', -1, 64)
		}
		return true
	})
	b = append(b, "}\n"...)
	h.buf = b
	_, err := h.w.Write(b)
	return err
}

// plainRecord reports whether Handler formats r itself: a time of
// four-digit year, and attributes that are strings, integers, and floats
// that encoding/json writes without an exponent.
func plainRecord(r slog.Record) bool {
	if r.Time.IsZero() || r.Time.Year() < 0 || r.Time.Year() >= 10000 {
		return false
	}
	plain := true
	r.Attrs(func(a slog.Attr) bool {
		switch a.Value.Kind() {
		case slog.KindString, slog.KindInt64:
		case slog.KindFloat64:
			f := math.Abs(a.Value.Float64())
			plain = f == 0 || (f >= 1e-6 && f < 1e21)
		default:
			plain = a.Equal(slog.Attr{})
		}
		if a.Key == "" && !a.Equal(slog.Attr{}) {
			plain = false
		}
		return plain
	})
	return plain
}

// appendJSONString appends s as a JSON string, escaped as log/slog's JSON
// handler escapes it: ", \ and control characters, invalid UTF-8 as
// U+FFFD, and U+2028 and U+2029.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
