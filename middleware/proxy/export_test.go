package proxy

// NewTransport is newTransport, for the benchmarks of package proxy_test.
var NewTransport = newTransport
