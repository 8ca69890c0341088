package status_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentid/agentid/middleware"
	"github.com/agentid/agentid/middleware/status"
	"github.com/agentid/agentid/signer"
	"github.com/agentid/agentid/signer/signertest"
	"github.com/agentid/agentid/signer/signertest/testenv"
)

// chromium returns the path of a Chromium binary. It skips the test when
// there is none, and fails instead under CI (which installs it).
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Chromium: skipped with -short")
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.SkipOrFail(t, "no chromium binary on PATH (CI installs the Debian chromium package): the browser test of the status page is skipped")
	return ""
}

// runChromium runs headless Chromium with args and returns its stdout.
func runChromium(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-extensions", "--disable-background-networking",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

var (
	minuteRE = regexp.MustCompile(`<g class="minute" data-minute="[^"]*" data-verified="(\d+)" data-not-present="(\d+)" data-unverified="(\d+)" data-invalid="(\d+)"`)
	agentRE  = regexp.MustCompile(`<tr class="agent" data-id="([^"]*)" data-requests="(\d+)" data-verified="(\d+)" data-invalid="(\d+)"`)
	reasonRE = regexp.MustCompile(`<tr class="reason" data-outcome="([^"]*)" data-reason="([^"]*)" data-count="(\d+)"`)
	loadRE   = regexp.MustCompile(`(?i)\b(src|href|action|srcset|poster|formaction|background|ping)\s*=\s*"([^"]*)"`)
)

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestStatusPageInChromium sends real signed, unsigned and badly signed
// requests through the verifier over HTTP, then loads /status in headless
// Chromium: the rendered DOM's chart and tables show those counts, and the
// page loads nothing but itself (its Content-Security-Policy forbids it,
// its DOM names no external resource, and the server sees no other
// request).
func TestStatusPageInChromium(t *testing.T) {
	bin := chromium(t)
	now := time.Now()
	page := status.New(status.Config{})
	keys := middleware.NewStaticKeys()
	agents := map[string]signer.PrivateKey{
		"https://alpha.agents.example": signertest.Key(0x71),
		"https://beta.agents.example":  signertest.Key(0x72),
	}
	for origin, k := range agents {
		keys.Add(origin, k.Public)
	}
	// The API's address is the authority the requests are signed for.
	api := httptest.NewUnstartedServer(nil)
	defer api.Close()
	v, err := middleware.New(middleware.Config{Keys: keys, Authorities: []string{api.Listener.Addr().String()}, Mode: middleware.Observe, OnResult: page.Observe})
	if err != nil {
		t.Fatal(err)
	}
	api.Config.Handler = v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	api.Start()

	var mu sync.Mutex
	other := map[string]int{}
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/status" {
			page.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		other[r.URL.Path]++
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer site.Close()

	send := func(origin string, at time.Time) {
		r, _ := http.NewRequest("GET", api.URL+"/data", nil)
		if origin != "" {
			if err := signer.Sign(r, agents[origin], signer.Options{SignatureAgent: origin, Now: func() time.Time { return at }}); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for range 7 {
		send("https://alpha.agents.example", now)
	}
	for range 3 {
		send("https://beta.agents.example", now)
	}
	for range 4 {
		send("https://beta.agents.example", now.Add(-time.Hour)) // expired
	}
	for range 2 {
		send("", now)
	}

	resp, err := http.Get(site.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Content-Security-Policy"); got != "default-src 'none'; style-src 'unsafe-inline'; img-src data:" {
		t.Errorf("Content-Security-Policy = %q", got)
	}

	dom := runChromium(t, bin, "--dump-dom", site.URL+"/status")
	if !strings.Contains(dom, `<svg id="chart"`) {
		t.Fatalf("Chromium's DOM has no chart:\n%s", dom)
	}
	var verified, unsignedN, unverifiedN, invalidN, bars int
	for _, m := range minuteRE.FindAllStringSubmatch(dom, -1) {
		bars++
		verified += atoi(m[1])
		unsignedN += atoi(m[2])
		unverifiedN += atoi(m[3])
		invalidN += atoi(m[4])
	}
	if bars != status.Minutes || verified != 10 || unsignedN != 2 || unverifiedN != 0 || invalidN != 4 {
		t.Errorf("chart: %d bars with %d verified, %d not-present, %d unverified, %d invalid; want %d bars, 10, 2, 0, 4", bars, verified, unsignedN, unverifiedN, invalidN, status.Minutes)
	}
	if n := strings.Count(dom, "<rect "); n < 1 {
		t.Errorf("the chart draws no bar")
	}
	rows := agentRE.FindAllStringSubmatch(dom, -1)
	if len(rows) != 2 || rows[0][1] != "https://alpha.agents.example" || rows[0][2] != "7" || rows[0][3] != "7" ||
		rows[1][1] != "https://beta.agents.example" || rows[1][2] != "3" || rows[1][3] != "3" || rows[1][4] != "0" {
		// The expired signatures are refused before their Signature-Agent
		// is resolved: they carry no identity and count only as invalid.
		t.Errorf("top agents %v; want alpha 7 (7 verified), beta 3 (3 verified)", rows)
	}
	reasons := reasonRE.FindAllStringSubmatch(dom, -1)
	if len(reasons) != 2 || reasons[0][1] != "invalid" || reasons[0][2] != "invalid_freshness" || reasons[0][3] != "4" ||
		reasons[1][1] != "not-present" || reasons[1][2] != "unsigned" || reasons[1][3] != "2" {
		t.Errorf("reasons %v, want invalid invalid_freshness 4, not-present unsigned 2", reasons)
	}
	if !strings.Contains(dom, `<td colspan="3">No refusal.</td>`) { // observe mode refuses nothing
		t.Errorf("the page shows refusals in observe mode")
	}
	for _, m := range loadRE.FindAllStringSubmatch(dom, -1) {
		if !strings.HasPrefix(m[2], "data:") {
			t.Errorf("the DOM loads %s=%q", m[1], m[2])
		}
	}
	if strings.Contains(dom, "url(") || strings.Contains(dom, "@import") || strings.Contains(strings.ToLower(dom), "<script") {
		t.Error("the DOM has a url(), @import or script")
	}
	mu.Lock()
	if len(other) != 0 {
		t.Errorf("loading the page requested %v from the server", other)
	}
	mu.Unlock()
}

// TestStatusPageScreenshot renders an hour of made-up traffic and saves a
// screenshot to the file AGENTID_STATUS_SCREENSHOT names (the
// documentation's docs/status-page.png); it is skipped when that is unset.
func TestStatusPageScreenshot(t *testing.T) {
	out := os.Getenv("AGENTID_STATUS_SCREENSHOT")
	if out == "" {
		t.Skip("AGENTID_STATUS_SCREENSHOT is not set")
	}
	bin := chromium(t)
	clk := signertest.NewClock(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
	page := status.New(status.Config{Now: clk.Now, Title: "agentid proxy — api.example.com"})
	ids := []string{"https://chatgpt.com", "https://agent-3f9c2a61d0b74e85a1c2d3e4.agentid.example", "https://crawler.search.example", "https://bot.shop.example"}
	for m := range 60 {
		for i := range 20 + (m*7)%25 {
			switch {
			case i%9 == 8:
				page.Observe(unsigned())
			case i%13 == 12:
				page.Observe(invalid("", middleware.CodeExpiredSignature))
			case m > 40 && m < 44 && i%5 == 0:
				page.Observe(invalid(ids[2], middleware.CodeKeyFetchFailed))
			default:
				page.Observe(verified(ids[(i*i+m)%len(ids)%(1+i%len(ids))]))
			}
		}
		if m%17 == 0 {
			page.Observe(invalid("", middleware.CodeReplayedNonce))
		}
		clk.Advance(time.Minute)
	}
	site := httptest.NewServer(page)
	defer site.Close()
	abs, _ := filepath.Abs(out)
	runChromium(t, bin, "--hide-scrollbars", "--window-size=900,1000", "--screenshot="+abs, site.URL+"/status")
	if st, err := os.Stat(abs); err != nil || st.Size() == 0 {
		t.Errorf("screenshot %s: %v", abs, err)
	}
}
