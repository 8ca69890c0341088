package middleware

import "net/url"

// CheckPath reports whether the path of u is normal, the only form route
// rules and proxies accept: the path a server behind them reads is then
// the path they matched, however that server decodes and normalises it.
// It returns nil for a normal path, else an invalid_request error (400)
// saying what is wrong.
//
// A normal path, as sent (u.EscapedPath(), what a proxy forwards), starts
// with "/" and holds no
//   - empty segment ("//"), except a trailing "/";
//   - dot segment ("." or ".."), nor any segment ending in "." (servers
//     that drop trailing dots read "/api./x" as "/api/x");
//   - backslash, raw or encoded (some servers read it as "/");
//   - ";" , raw or encoded (servlet containers drop ";params" from a
//     segment, so "/api;x/y" would be "/api/y" and "/..;/" a dot segment);
//   - encoded "/", ".", "%" (a path decoded twice), control character or
//     DEL.
//
// Decoding the path once then changes no segment boundary and makes no dot
// segment, so u.Path is what a route matches. The check reads each byte
// once: its cost is linear in the path's length.
func CheckPath(u *url.URL) *Error {
	p := u.EscapedPath()
	if p == "" || p[0] != '/' {
		return Fail(CodeInvalidRequest, "the request path must start with /")
	}
	seg := 1 // start of the current segment
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			if why := badSegment(p[seg:i], i == len(p)); why != "" {
				return Fail(CodeInvalidRequest, "the request path is not normal: %s (at byte %d); send the path as the service reads it", why, seg)
			}
			seg = i + 1
			continue
		}
		switch c := p[i]; {
		case c == '\\':
			return Fail(CodeInvalidRequest, "the request path is not normal: it holds a backslash (at byte %d)", i)
		case c == ';':
			return Fail(CodeInvalidRequest, "the request path is not normal: it holds ; (at byte %d), which servlet containers read as a parameter", i)
		case c < 0x20 || c == 0x7f:
			return Fail(CodeInvalidRequest, "the request path holds a control character (at byte %d)", i)
		case c == '%':
			if i+2 >= len(p) || unhex(p[i+1]) < 0 || unhex(p[i+2]) < 0 {
				return Fail(CodeInvalidRequest, "the request path holds %% not followed by two hex digits (at byte %d)", i)
			}
			b := byte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			switch {
			case b == '/', b == '.', b == '\\', b == '%', b == ';', b < 0x20, b == 0x7f:
				return Fail(CodeInvalidRequest, "the request path is not normal: it holds %s, an encoded %q (at byte %d); send it unencoded, or not at all", p[i:i+3], b, i)
			}
			i += 2
		}
	}
	return nil
}

// badSegment says what is wrong with one segment of a path (as sent), ""
// if nothing; last reports the segment after the last "/".
func badSegment(s string, last bool) string {
	switch {
	case s == "" && !last:
		return "it holds an empty segment (//)"
	case s == "." || s == "..":
		return "it holds a dot segment (" + s + ")"
	case s != "" && s[len(s)-1] == '.':
		return "a segment ends in a dot"
	}
	return ""
}

// unhex returns the value of a hex digit, -1 if c is not one.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
