package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/agentid/agentid/signer/agent"
)

// demoReply is what the demo reads from a response.
type demoReply struct {
	Status int
	UID    string // "uid" of a JSON success body
	Kid    string // "kid" of a JSON success body
	Code   string // error code of a JSON error body
}

func (r demoReply) String() string {
	s := fmt.Sprint(r.Status)
	if r.Code != "" {
		s += " " + r.Code
	}
	if r.UID != "" {
		s += " for " + r.UID
	}
	if r.Kid != "" {
		s += " (kid " + r.Kid + ")"
	}
	return s
}

// call sends GET url signed by creds (default profile, through the demo's
// loopback transport).
func (d *demo) call(ctx context.Context, creds agent.Credentials, url string) (demoReply, error) {
	c := creds.Client(d.transport)
	c.Timeout = demoHTTPTimeout
	return d.send(ctx, c, http.MethodGet, url, nil)
}

// expect is call that wants status, the agent's uid and kid in the body.
func (d *demo) expect(ctx context.Context, creds agent.Credentials, url string, status int, kid string) (demoReply, error) {
	r, err := d.call(ctx, creds, url)
	if err != nil {
		return r, err
	}
	if r.Status != status || r.UID != d.uid || r.Kid != kid {
		return r, fmt.Errorf("GET %s answered %s, want %d for %s (kid %s)", url, r, status, d.uid, kid)
	}
	return r, nil
}

// send sends one request and reads its status and JSON body.
func (d *demo) send(ctx context.Context, c *http.Client, method, url string, h http.Header) (demoReply, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return demoReply{}, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return demoReply{}, err // *url.Error: method, URL and cause
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return demoReply{}, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	var b struct {
		UID string `json:"uid"`
		Kid string `json:"kid"`
	}
	_ = json.Unmarshal(body, &b) // a non-JSON body leaves the fields empty
	code, _, _ := agent.ParseErrorBody(body)
	return demoReply{Status: resp.StatusCode, UID: b.UID, Kid: b.Kid, Code: code}, nil
}
