// Package policy says which verified agents an API owner lets in: the
// identity allow lists, deny lists and budgets read from an agent
// (Identity, Services), the lists as written (List), and the one compiled
// form every decision is made on (Matcher). Package rules, the proxy, its
// configuration (proxyconfig), the Caddy module and package agentlimit
// share it. A list that does not validate is an error when it is
// compiled, never a silent "nobody".
//
// Behind the verifier's middleware:
//
//	allow, err := policy.Allow(policy.List{Hosts: []string{"*.agentid.example"},
//		UIDs: []string{"agent-0123*"}, Services: []string{"https://agentid.example"}})
//	if err != nil {
//		return err
//	}
//	http.Handle("/", verify(allow.Require(handler)))
package policy
