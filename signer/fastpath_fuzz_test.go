package signer

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
)

// The fast path must agree with httpsfv wherever it answers: the same
// members, items, parameters and values, in the same order. These targets
// run over their seeds (below and in testdata/fuzz) with every go test, and
// CI fuzzes each for a bounded time.

// fastPathSeeds are the field values real signers send, and near misses.
var fastPathSeeds = []string{
	`sig1=("@authority");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=1735693200;nonce="e8N7S2MFd/qrd6T2R3tdfAuuANngKI7LFtKYI/vowzk4lAZYadIX6wW25MwG7DCT9RUKAJ0qVkU0mEeLElW1qg==";tag="web-bot-auth"`,
	`sig2=("@authority" "signature-agent";key="agent2");created=1735689600;keyid="k";alg="ed25519";expires=1735693200;nonce="n";tag="web-bot-auth"`,
	`sig1=("@method" "@authority" "@path" "content-digest" "signature-agent";key="sig1");created=1;keyid="k";alg="ed25519";expires=2;nonce="n";tag="web-bot-auth"`,
	`sig1=:d2pmTvmbncD3xQm8E9ZV2828BjQWGgiwAaw5bAkgibUopemLJcWDy/lkbbHAve4cRAtx31Iq786U7it++wgGxbtRxf8Udx7zFZsckzXaJMkA7ChG52eSkFxykJeNqsrWH5S+oxNFlD4dzVuwe8DhTSja8xxbR/Z2cOGdCbzR72rgFWhzx2VjBqJzsPLMIQKhO4DGezXehhWwE56YCE+O6c0mKZsfxVrogUvA4HELjVKWmAvtl6UnCh8jYzuVG5WSb/QEVPnP5TmcAnLH1g+s++v6d4s8m0gCw1fV5/SITLq9mhho8K3+7EPYTU8IU1bLhdxO5Nyt8C8ssinQ98Xw9Q==:`,
	`sig1=:AAAA:, sig2=:AAAA:`,
	`sig1="https://agent-x.example"`,
	`g="https://agent.bot.goog"`,
	`"https://chatgpt.com"`,
	`https://duckduckgo.com`,
	`sig1="https://example.com/jwks.json";type=jwks_uri`,
	`sig1="https://example.com";type=directory, sig2="https://example.com/card";type=cimd`,
	`sig1=agent-x.api.vestauth.com`,
	`sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:, sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:`,
	`a=(1 2), b=3, c=4;aa=bb, d=(5 6);valid`,
	`a=?0, b, c;foo=bar`,
	`a=1.5`, `a=-0`, `a=-`, `a=999999999999999`, `a=9999999999999999`,
	`a="x\"y"`, `a="é"`, `a=:AAA:`, `a=:AA==:`, `a=:!:`,
	`a=(  "x"  "y"  )`, `a=("x""y")`, `a=("x" ;k)`, `a=( )`,
	`a=1,b=2`, `a=1 ,b=2`, `a=1,	b=2`, `a=1, `, ` a=1`, `a=1 `, `a=1, a=2`,
	`a;x=1;x=2`, `A=1`, `*a=1`, `a*.-_9=1`, `a=%token`, `a=tok/en:x`,
	`a=@1`, `a=*`, `a="unterminated`, `a=(`, `a=("x"`, ``,
	`sig1=("@authority");created=1;created=2`,
	`sig1=("@query-param";name="Pet" "example-dict";key="a" "example-dict";sf "x";bs "y";req)`,
}

func FuzzFastPathAgrees(f *testing.F) {
	for _, s := range fastPathSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ms, st := parseDictFast(s, 0, nil); st == parsed {
			d, err := httpsfv.UnmarshalDictionary([]string{s})
			if err != nil {
				t.Fatalf("fast path parsed dictionary %q, httpsfv refused it: %v", s, err)
			}
			want, err := membersFromHTTPSFV(d)
			if err != nil {
				t.Fatalf("httpsfv dictionary of %q does not convert: %v", s, err)
			}
			if got, exp := dumpMembers(ms), dumpMembers(want); got != exp {
				t.Fatalf("dictionary %q:\nfast    %s\nhttpsfv %s", s, got, exp)
			}
		}
		if it, ok := parseItemFast(s); ok {
			hit, err := httpsfv.UnmarshalItem([]string{s})
			if err != nil {
				t.Fatalf("fast path parsed item %q, httpsfv refused it: %v", s, err)
			}
			want, ok := itemFromHTTPSFV(hit)
			if !ok {
				t.Fatalf("httpsfv item of %q does not convert", s)
			}
			if got, exp := dumpItem(it), dumpItem(want); got != exp {
				t.Fatalf("item %q:\nfast    %s\nhttpsfv %s", s, got, exp)
			}
		}
		// A dictionary both parse serializes the same, and reparses.
		if ms, err := parseDict(s, 0); err == nil {
			var b []byte
			for i := range ms {
				b = append(b, ms[i].key...)
				b = append(b, '=')
				var ok bool
				if b, ok = appendMemberValue(b, &ms[i]); !ok {
					return
				}
				b = append(b, ',', ' ')
			}
			if len(b) > 0 {
				again, err := parseDict(string(b[:len(b)-2]), 0)
				if err != nil || dumpMembers(again) != dumpMembers(ms) {
					t.Fatalf("%q re-serialized as %q does not reparse the same: %v", s, b, err)
				}
			}
		}
	})
}

func dumpItem(it sfItem) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:%v:%d:%q", it.val.kind, it.val.t, it.val.n, it.val.s)
	for _, p := range it.params {
		fmt.Fprintf(&b, ";%s=%d:%v:%d:%q", p.key, p.val.kind, p.val.t, p.val.n, p.val.s)
	}
	return b.String()
}

func dumpMembers(ms []member) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "[%s inner=%v ", m.key, m.inner)
		if m.inner {
			for _, it := range m.items {
				b.WriteString("(" + dumpItem(it) + ")")
			}
			b.WriteString(dumpItem(sfItem{params: m.params}))
		} else {
			b.WriteString(dumpItem(m.item))
		}
		b.WriteString("]")
	}
	return b.String()
}

// FuzzEd25519Backend checks that the verification backend accepts and
// refuses exactly what crypto/ed25519.Verify does, for any public key,
// message and signature: including small-order points, non-canonical
// encodings of A and R, and S ≥ L.
func FuzzEd25519Backend(f *testing.F) {
	seed := bytes.Repeat([]byte{7}, 32)
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	msg := []byte(`"@authority": example.com` + "\n" + `"@signature-params": ("@authority");created=1`)
	sig := ed25519.Sign(priv, msg)
	f.Add([]byte(pub), msg, sig)
	f.Add([]byte(pub), msg[1:], sig)
	// Small-order and non-canonical points (as A, and as R in the signature).
	for _, p := range ed25519SpecialPoints() {
		f.Add(p, msg, sig)
		f.Add([]byte(pub), msg, append(append([]byte{}, p...), sig[32:]...))
		f.Add(p, msg, append(append([]byte{}, p...), bytes.Repeat([]byte{0}, 32)...))
	}
	// S = S + L (non-canonical S).
	bigS := append([]byte{}, sig...)
	addL(bigS[32:])
	f.Add([]byte(pub), msg, bigS)
	hot := NewExpandedKeys(DefaultExpandedKeyCacheSize)
	f.Fuzz(func(t *testing.T, pub, msg, sig []byte) {
		if len(pub) != ed25519.PublicKeySize {
			return
		}
		want := ed25519.Verify(pub, msg, sig)
		pk := newPublicKey(ed25519.PublicKey(pub))
		if got := verifyEd25519(&pk, msg, sig, nil); got != want {
			t.Fatalf("backend %s = %v, crypto/ed25519 = %v\npub %x\nmsg %x\nsig %x", ed25519Backend, got, want, pub, msg, sig)
		}
		// Without its own precomputed form the key is verified through the
		// cache of expanded keys: missed (no precomputation), then expanded
		// on its second miss, then found.
		unexpanded := pk.Unexpanded()
		for i := range 3 {
			if got := verifyEd25519(&unexpanded, msg, sig, hot); got != want {
				t.Fatalf("backend %s without its precomputed form (verification %d) = %v, crypto/ed25519 = %v", ed25519Backend, i+1, got, want)
			}
		}
	})
}

// ed25519SpecialPoints returns encodings that verifiers disagree on: the
// small-order points, and non-canonical encodings (y ≥ p, or the sign bit
// set on x = 0).
func ed25519SpecialPoints() [][]byte {
	hexes := []string{
		"0100000000000000000000000000000000000000000000000000000000000000", // identity
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // order 2
		"0000000000000000000000000000000000000000000000000000000000000080", // order 4, sign bit
		"0000000000000000000000000000000000000000000000000000000000000000", // order 4
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", // order 8
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", // order 8
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85", // order 8
		"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p
		"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p+1
		"0100000000000000000000000000000000000000000000000000000000000080", // identity, sign bit set
		"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff", // y = 2^255-1
	}
	out := make([][]byte, len(hexes))
	for i, h := range hexes {
		b := make([]byte, 32)
		fmt.Sscanf(h, "%x", &b)
		out[i] = b
	}
	return out
}

// addL adds the group order L to the little-endian scalar s in place.
func addL(s []byte) {
	l := []byte{0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}
	carry := 0
	for i := range s {
		v := int(s[i]) + int(l[i]) + carry
		s[i], carry = byte(v), v>>8
	}
}
