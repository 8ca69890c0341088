package proccpu

import (
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// Fields 14 and 15 (utime 250, stime 50 ticks) after a command name
	// holding ") " itself.
	line := "4242 (we) ird) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0 100 1000000 500 18446744073709551615\n"
	got, err := parseStatCPU([]byte(line))
	if err != nil || got != 3*time.Second {
		t.Errorf("parseStatCPU = %v, %v; want 3s", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 0 0"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q) = nil error", bad)
		}
	}
}

func TestParseTCPTable(t *testing.T) {
	table := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:9A3F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 100 0 0 10 0\n" +
		"   1: 0100007F:D431 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 20 4 30 10 -1\n" +
		"   2: garbage\n"
	got := parseTCPTable([]byte(table))
	want := []tcpSocket{{localPort: 0x9A3F, state: tcpListen, inode: 123456}, {localPort: 0xD431, state: tcpEstablished, inode: 777}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("parseTCPTable = %+v, want %+v", got, want)
	}
}

func TestBackendClientPort(t *testing.T) {
	for title, want := range map[string]int{
		"postgres: 15/main: postgres test 127.0.0.1(54321) idle":                54321,
		"postgres: app (weird) db ::1(40000) INSERT":                            40000,
		"postgres: 15/main: walwriter ":                                         0,
		"postgres: 15/main: postgres test 127.0.0.1(99999) idle in transaction": 0,
	} {
		if got := backendClientPort(title); got != want {
			t.Errorf("backendClientPort(%q) = %d, want %d", title, got, want)
		}
	}
}
