// Package softhsmtest creates SoftHSM2 tokens in temporary folders for
// tests of PKCS#11 signing.
//
//	dir, conf, err := softhsmtest.NewToken(tmp, "agentid-test", "1234")
//	os.Setenv("SOFTHSM2_CONF", conf) // before the module is first loaded
package softhsmtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// modulePaths are where Debian, Ubuntu and source builds put SoftHSM2.
var modulePaths = []string{
	"/usr/lib/softhsm/libsofthsm2.so",
	"/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/local/lib/softhsm/libsofthsm2.so",
}

// Module returns the path of the SoftHSM2 PKCS#11 module, or an error
// saying how to install it.
func Module() (string, error) {
	for _, p := range modulePaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("SoftHSM2 is not installed (apt-get install softhsm2)")
}

// NewToken writes a SoftHSM2 configuration whose token folder lies in dir
// and initializes a token labelled label with user PIN pin in it (the SO
// PIN is pin too), with softhsm2-util. It returns the configuration's path,
// the value for SOFTHSM2_CONF.
func NewToken(dir, label, pin string) (string, error) {
	util, err := exec.LookPath("softhsm2-util")
	if err != nil {
		return "", errors.New("softhsm2-util is not installed (apt-get install softhsm2)")
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.MkdirAll(tokens, 0o700); err != nil {
		return "", err
	}
	conf := filepath.Join(dir, "softhsm2.conf")
	text := fmt.Sprintf("directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n", tokens)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return "", err
	}
	cmd := exec.Command(util, "--init-token", "--free", "--label", label, "--pin", pin, "--so-pin", pin)
	cmd.Env = append(os.Environ(), "SOFTHSM2_CONF="+conf)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("softhsm2-util --init-token: %v: %s", err, out)
	}
	return conf, nil
}
